"""Finding a script's training regions: epoch, step and eval loops, and library train calls.

The contract (also the JSON of ``autoitt loops --json``) is :class:`Region`.
A loop is a *step* when one iteration updates parameters, directly or through
functions of the same file it calls (followed up to :data:`CALL_DEPTH` deep);
an *epoch* when its body holds a step loop or it iterates over epochs; an
*eval* when it runs forward passes with gradients off, after ``model.eval()``
or in an eval-like function. A *train-call* is one call that trains inside a
library (``model.fit``). Everything else is left alone.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from . import _evidence as ev
from ._names import ImportTable, dotted
from ._parsing import Source
from ._walk import DEFINITIONS, LOOPS, child_blocks

ROLES = ("epoch", "step", "eval", "train-call")
#: How many same-file calls deep detection follows from a loop body.
CALL_DEPTH = 4

_DIRECTIVE = re.compile(r"#\s*autoitt:\s*(skip|step|epoch|eval)\b", re.I)
#: Text autoitt puts in every copy it writes; its presence means "already instrumented".
INSTRUMENTED_MARKER = "# autoitt: instrumented"


@dataclass(frozen=True)
class Region:
    """One detected training region.

    ``line``/``end_line``: 1-based lines in the original file of the ``for``/
    ``while`` keyword (or of the call) and of the region's last line.
    ``function``: ``__qualname__`` of the innermost enclosing function without
    ``<locals>``, ``None`` at module level. ``label``: the ITT task name of one
    iteration (or of the call). ``reason``: why it was detected.

    The remaining fields are for planning: ``ordinal`` is the statement's
    position in a pre-order walk (see :mod:`transforms._walk`), ``kind`` is
    ``for``/``while``/``call``, ``outermost`` says whether no other region is
    running whenever this one runs.
    """

    line: int
    end_line: int
    role: str
    function: Optional[str]
    label: str
    reason: str
    ordinal: int = field(compare=False)
    kind: str = field(compare=False)
    outermost: bool = field(compare=False, default=True)

    def to_json(self) -> dict:
        return {
            "line": self.line,
            "end_line": self.end_line,
            "role": self.role,
            "function": self.function,
            "label": self.label,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Note:
    """Something detection decided not to do, and why (shown to the user)."""

    line: Optional[int]
    message: str


@dataclass(frozen=True)
class Detection:
    """Everything the planner needs to know about a script."""

    regions: Tuple[Region, ...]
    notes: Tuple[Note, ...]
    uses_torch: bool
    torch_names: Tuple[str, ...]
    torch_profiler: Optional[Note]
    already_instrumented: Optional[str]
    names_in_use: frozenset
    #: compound statement ordinal -> ordinal past its subtree; lets the rewrite skip untouched code
    spans: Dict[int, int] = field(default_factory=dict, repr=False)


@dataclass
class _Function:
    node: ast.AST
    qualname: str
    class_qualname: Optional[str]
    parent: Optional["_Function"]
    compiled: Optional[str]
    grad_off: Optional[str]
    #: the loops (of the function that defines this one) lexically around the definition
    defined_in_loops: Tuple[ast.AST, ...] = ()

    @property
    def name(self) -> str:
        return self.node.name

    def chain(self) -> Iterable["_Function"]:
        function: Optional[_Function] = self
        while function is not None:
            yield function
            function = function.parent


@dataclass
class _Site:
    """A loop statement or a train-call statement, with its surroundings."""

    node: ast.AST
    ordinal: int
    function: Optional[_Function]
    loops: Tuple[ast.AST, ...]
    grad_off: Optional[str]
    call: Optional[ast.Call] = None
    call_label: Optional[str] = None
    #: the loop's body (or the call's statement) sits on its header's line: `for x in y: step(x)`
    one_line: bool = False

    @property
    def compiled(self) -> Optional[str]:
        for function in self.function.chain() if self.function else ():
            if function.compiled:
                return f"{function.compiled} {function.qualname}"
        return None


def _import_statements(stmts: Sequence[ast.stmt]) -> Iterable[ast.AST]:
    """Every import statement, at any depth (a statement-only walk: cheap)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        for block in child_blocks(stmt):
            yield from _import_statements(block)


def _own_expressions(stmt: ast.stmt) -> List[ast.AST]:
    """The expressions a statement evaluates itself, not those of the blocks it holds."""
    if not child_blocks(stmt):
        return [stmt]
    roots: List[ast.AST] = []
    for name, value in ast.iter_fields(stmt):
        if name in ("body", "orelse", "finalbody"):
            continue
        if name == "handlers":
            roots.extend(h.type for h in value if h.type is not None)
        elif name == "cases":
            for case in value:
                roots.append(case.pattern)
                if case.guard is not None:
                    roots.append(case.guard)
        elif isinstance(value, list):
            roots.extend(v for v in value if isinstance(v, ast.AST))
        elif isinstance(value, ast.AST):
            roots.append(value)
    return roots


class _Index:
    """One walk over the script: ordinals, functions, classes, loops, calls, names.

    Every expression node is visited once here; later questions ("which calls
    does this loop body make?") are answered from the per-statement lists.
    """

    def __init__(self, source: Source) -> None:
        self.tree = source.tree
        self.lines = source.lines
        self.imports = ImportTable.from_imports(_import_statements(self.tree.body))
        self.functions: Dict[str, _Function] = {}
        self.function_of_node: Dict[int, _Function] = {}
        self.classes: Dict[str, Dict[str, _Function]] = {}
        self.loops: List[_Site] = []
        self.nested: Dict[int, List[_Site]] = {}
        self.call_sites: List[_Site] = []
        self.mode_switches: Dict[Optional[str], List[Tuple[int, str]]] = {}
        self.calls_of: Dict[int, List[ast.Call]] = {}
        self.all_calls: List[ast.Call] = []
        self.assignments: List[ast.stmt] = []
        self.names: Set[str] = set()
        #: compound statement ordinal -> ordinal just past its last nested statement
        self.spans: Dict[int, int] = {}
        self.ordinal = 0
        self._walk(self.tree.body, None, None, (), None)
        self.bindings = ev.collect_bindings(self.assignments, self.imports, set(self.classes))
        self.method_names: Dict[str, List[_Function]] = {}
        for methods in self.classes.values():
            for name, method in methods.items():
                self.method_names.setdefault(name, []).append(method)
        self._block_calls: Dict[Tuple[int, bool], List[ast.Call]] = {}

    def _walk(
        self,
        stmts: Sequence[ast.stmt],
        function: Optional[_Function],
        class_qualname: Optional[str],
        loops: Tuple[ast.AST, ...],
        grad_off: Optional[str],
        one_line: bool = False,
    ) -> None:
        prefix = function.qualname + "." if function else ""
        for stmt in stmts:
            ordinal = self.ordinal
            self.ordinal += 1
            self._scan(stmt)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{class_qualname}.{stmt.name}" if class_qualname else prefix + stmt.name
                compiled = next(
                    (c for c in (ev.compile_decorator(d, self.imports) for d in stmt.decorator_list) if c), None
                )
                no_grad = next(
                    (g for g in (ev.grad_disabled(d, self.imports) for d in stmt.decorator_list) if g), None
                )
                info = _Function(stmt, qual, class_qualname, function, compiled, no_grad, loops)
                self.functions[qual] = info
                self.function_of_node[id(stmt)] = info
                if class_qualname:
                    self.classes.setdefault(class_qualname, {})[stmt.name] = info
                self._walk(stmt.body, info, None, (), None)
                self.spans[ordinal] = self.ordinal
                continue
            if isinstance(stmt, ast.ClassDef):
                qual = f"{class_qualname}.{stmt.name}" if class_qualname else prefix + stmt.name
                self.classes.setdefault(qual, {})
                self._walk(stmt.body, function, qual, loops, grad_off)
                self.spans[ordinal] = self.ordinal
                continue
            inner_grad_off = grad_off
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    inner_grad_off = ev.grad_disabled(item.context_expr, self.imports) or inner_grad_off
            if isinstance(stmt, LOOPS):
                site = _Site(stmt, ordinal, function, loops, grad_off, one_line=self._one_line(stmt.body))
                self.loops.append(site)
                for outer in loops:
                    self.nested.setdefault(id(outer), []).append(site)
            elif not child_blocks(stmt):
                self._index_simple(stmt, ordinal, function, loops, grad_off, one_line)
            inner_loops = loops + (stmt,) if isinstance(stmt, LOOPS) else loops
            blocks = child_blocks(stmt)
            for block in blocks:
                self._walk(block, function, class_qualname, inner_loops, inner_grad_off, self._one_line(block))
            if blocks:
                self.spans[ordinal] = self.ordinal

    def _one_line(self, block: Sequence[ast.stmt]) -> bool:
        """True when a block is written on its header's line (``if x: y()``).

        Its first statement is then not the first thing on its line. Such a
        body cannot take markers without being re-laid out, which ``strip``
        could not undo byte for byte, so autoitt leaves it alone.
        """
        if not block:
            return False
        first = block[0]
        line = self.lines[first.lineno - 1] if first.lineno - 1 < len(self.lines) else ""
        return bool(line.encode("utf-8")[: first.col_offset].strip())

    def _scan(self, stmt: ast.stmt) -> None:
        """Record the calls and names of ``stmt``'s own expressions (once per node)."""
        calls: List[ast.Call] = []
        names = self.names
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            self.assignments.append(stmt)
        for root in _own_expressions(stmt):
            for node in ast.walk(root):
                if isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.Call):
                    calls.append(node)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
        if calls:
            self.calls_of[id(stmt)] = calls
            self.all_calls.extend(calls)

    def block_calls(self, stmts: Sequence[ast.stmt], enter_loops: bool) -> List[ast.Call]:
        """Calls that running ``stmts`` makes itself: not in nested definitions, and
        not in nested loops unless ``enter_loops``."""
        found: List[ast.Call] = []
        for stmt in stmts:
            if isinstance(stmt, DEFINITIONS):
                # Defining runs only the decorators (and defaults); the body runs when called.
                found.extend(self.calls_of.get(id(stmt), ()))
                continue
            if not enter_loops and isinstance(stmt, LOOPS):
                continue
            found.extend(self.calls_of.get(id(stmt), ()))
            for block in child_blocks(stmt):
                found.extend(self.block_calls(block, enter_loops))
        return found

    def function_calls(self, function: _Function, enter_loops: bool) -> List[ast.Call]:
        key = (id(function.node), enter_loops)
        cached = self._block_calls.get(key)
        if cached is None:
            cached = self._block_calls[key] = self.block_calls(function.node.body, enter_loops)
        return cached

    def _index_simple(self, stmt, ordinal, function, loops, grad_off, one_line) -> None:
        key = function.qualname if function else None
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            switch = ev.mode_switch(stmt.value)
            if switch:
                self.mode_switches.setdefault(key, []).append((stmt.lineno, switch))
        for call in self.calls_of.get(id(stmt), ()):
            label = ev.train_call(call, self.imports)
            if label:
                self.call_sites.append(_Site(stmt, ordinal, function, loops, grad_off, call, label, one_line))
                break

    # -- call resolution ---------------------------------------------------

    def resolve(self, call: ast.Call, function: Optional[_Function]) -> Optional[_Function]:
        """The same-file function or method a call runs, when it can be told."""
        func = call.func
        if isinstance(func, ast.Name):
            for scope in function.chain() if function else ():
                found = self.functions.get(f"{scope.qualname}.{func.id}")
                if found:
                    return found
            found = self.functions.get(func.id)
            if found:
                return found
            methods = self.classes.get(func.id)
            return methods.get("__init__") if methods else None
        if not isinstance(func, ast.Attribute):
            return None
        receiver = dotted(func.value)
        if receiver in ("self", "cls") and function is not None:
            owner = next((f.class_qualname for f in function.chain() if f.class_qualname), None)
            if owner:
                return self._method(owner, func.attr)
        if receiver and receiver in self.bindings.instances:
            return self._method(self.bindings.instances[receiver], func.attr)
        if (
            receiver
            and receiver not in self.bindings.external
            and self.imports.resolve(func.value) == receiver
        ):
            # Last resort: a method name defined by exactly one class of this file.
            candidates = self.method_names.get(func.attr, [])
            if len(candidates) == 1 and receiver not in ("super",):
                return candidates[0]
        return None

    def _method(self, class_qualname: str, name: str) -> Optional[_Function]:
        return self.classes.get(class_qualname, {}).get(name)


class _Classifier:
    """Decides the role of each loop, following same-file calls."""

    def __init__(self, index: _Index, lines: Sequence[str]) -> None:
        self.index = index
        self.lines = lines
        self.site_of: Dict[int, _Site] = {id(site.node): site for site in index.loops}
        self.roles: Dict[int, Optional[Tuple[str, str]]] = {}
        self.notes: List[Note] = []
        self._in_progress: Set[int] = set()
        self._updates: Dict[Tuple[int, int], Optional[str]] = {}
        self._training: Dict[Tuple[int, int], Optional[Tuple[int, str]]] = {}
        self._loops_of: Dict[Optional[str], List[_Site]] = {}
        for site in index.loops:
            key = site.function.qualname if site.function else None
            self._loops_of.setdefault(key, []).append(site)

    # -- directives --------------------------------------------------------

    def directive(self, node: ast.AST) -> Optional[str]:
        """``skip``/``step``/``epoch``/``eval`` from a ``# autoitt:`` comment on the header."""
        first = node.lineno
        body = getattr(node, "body", None)
        last = body[0].lineno - 1 if body and body[0].lineno > first else first
        if not body:
            last = getattr(node, "end_lineno", first) or first
        candidates = list(range(first, last + 1))
        if first >= 2 and self.lines[first - 2].lstrip().startswith("#"):
            candidates.insert(0, first - 1)
        for number in candidates:
            if number - 1 < len(self.lines):
                match = _DIRECTIVE.search(self.lines[number - 1])
                if match:
                    return match.group(1).lower()
        return None

    # -- functions -----------------------------------------------------------

    def direct_update(self, function: _Function, depth: int, seen: Set[int]) -> Optional[str]:
        """Why calling ``function`` updates parameters once (outside its own loops)."""
        if depth <= 0 or id(function.node) in seen:
            return None
        key = (id(function.node), depth)
        if key not in self._updates:
            # Memoized per depth, so the call bound stays exact; a cycle cut
            # short by ``seen`` only ever hides an update, never invents one.
            calls = self.index.function_calls(function, enter_loops=False)
            self._updates[key] = self._update_from(calls, function, depth, seen | {id(function.node)})
        return self._updates[key]

    def _update_from(self, calls, function, depth: int, seen: Set[int]) -> Optional[str]:
        for call in calls:
            found = ev.update_evidence(call, self.index.bindings)
            if found:
                return found
        for call in calls:
            callee = self.index.resolve(call, function)
            if callee is not None:
                found = self.direct_update(callee, depth - 1, seen)
                if found:
                    if found.startswith("calls "):
                        return f"calls {callee.qualname}() -> {found[len('calls '):]}"
                    return f"calls {callee.qualname}(): {found}"
        return None

    def training_loop_in(self, function: _Function, depth: int, seen: Set[int]) -> Optional[Tuple[int, str]]:
        """(line, role) of a step or epoch loop that calling ``function`` runs."""
        if depth <= 0 or id(function.node) in seen:
            return None
        key = (id(function.node), depth)
        if key in self._training:
            return self._training[key]
        seen = seen | {id(function.node)}
        found = None
        for site in self._loops_of.get(function.qualname, []):
            role = self.role(site)
            if role and role[0] in ("step", "epoch"):
                found = site.node.lineno, role[0]
                break
        if found is None:
            for call in self.index.function_calls(function, enter_loops=True):
                callee = self.index.resolve(call, function)
                if callee is not None:
                    found = self.training_loop_in(callee, depth - 1, seen)
                    if found:
                        break
        self._training[key] = found
        return found

    # -- loops -----------------------------------------------------------------

    def role(self, site: _Site) -> Optional[Tuple[str, str]]:
        key = id(site.node)
        if key in self.roles:
            return self.roles[key]
        if key in self._in_progress:
            return None
        self._in_progress.add(key)
        try:
            result = self._classify(site)
        finally:
            self._in_progress.discard(key)
        self.roles[key] = result
        return result

    def _classify(self, site: _Site) -> Optional[Tuple[str, str]]:
        loop = site.node
        directive = self.directive(loop)
        if directive == "skip":
            return None
        if directive:
            return directive, f"forced by '# autoitt: {directive}'"
        body_end = loop.body[-1].end_lineno or loop.body[-1].lineno
        for inner in self.index.nested.get(id(loop), ()):
            if inner.node.lineno > body_end:
                continue  # in the loop's else clause: runs once, not every iteration
            role = self.role(inner)
            if role and role[0] in ("step", "epoch"):
                return "epoch", f"contains {role[0]} loop at line {inner.node.lineno}"
        calls = self.index.block_calls(loop.body, enter_loops=False)
        for call in calls:
            callee = self.index.resolve(call, site.function)
            if callee is not None:
                found = self.training_loop_in(callee, CALL_DEPTH, set())
                if found:
                    return "epoch", f"calls {callee.qualname}() which has a {found[1]} loop at line {found[0]}"
        update = self._update_from(calls, site.function, CALL_DEPTH, set())
        if update:
            return "step", f"updates parameters: {update}"
        for call in calls:
            label = ev.train_call(call, self.index.imports)
            if label and self.index.resolve(call, site.function) is None:
                return "epoch", f"runs {dotted(call.func) or label}() each iteration"
        epochs = ev.names_epochs(loop)
        if epochs and any(ev.is_forward_call(call) for call in calls):
            # A loop over epochs that only prints or formats (a history table) is not training.
            return "epoch", epochs
        context = self._eval_context(site)
        if context and any(ev.is_forward_call(call) for call in calls):
            return "eval", f"forward passes {context}"
        return None

    def _eval_context(self, site: _Site) -> Optional[str]:
        if site.grad_off:
            return f"under {site.grad_off}"
        loop = site.node
        for stmt in loop.body:
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    off = ev.grad_disabled(item.context_expr, self.index.imports)
                    if off:
                        return f"under {off}"
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and ev.mode_switch(stmt.value) == "eval":
                return f"after {dotted(stmt.value.func)}()"
        for call in self.index.block_calls(loop.body, enter_loops=False):
            for keyword in call.keywords:
                if keyword.arg == "training" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False:
                    return "with training=False"
        for function in site.function.chain() if site.function else ():
            if function.grad_off:
                return f"in @{function.grad_off.rstrip('()')} {function.qualname}()"
            if ev.eval_function_name(function.name):
                return f"in {function.qualname}()"
        key = site.function.qualname if site.function else None
        before = [(line, s) for line, s in self.index.mode_switches.get(key, []) if line < loop.lineno]
        if before and before[-1][1] == "eval":
            return f"after .eval() at line {before[-1][0]}"
        return None


def _instrumented_by(source: Source, index: _Index) -> Optional[str]:
    if INSTRUMENTED_MARKER in source.text:
        return "autoitt"
    for node in _import_statements(index.tree.body):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if any(name == "ittapi" or name.startswith("ittapi.") or name == "itt" for name in modules):
            return f"hand (imports {modules[0]} at line {node.lineno})"
    for node in index.all_calls:
        resolved = index.imports.resolve(node.func) or ""
        head, _, tail = resolved.rpartition(".")
        if tail in ("task_begin", "resume", "domain_create") and (head.startswith("ittapi") or head == "itt"):
            return f"hand ({dotted(node.func)}() at line {node.lineno})"
    return None


_TORCH_PROFILERS = frozenset((
    "torch.profiler.profile",
    "torch.autograd.profiler.profile",
    "torch.autograd.profiler.emit_itt",
    "torch.autograd.profiler.emit_nvtx",
    "torch.autograd.profiler_legacy.profile",
))


def _torch_profiler(index: _Index) -> Optional[Note]:
    for node in index.all_calls:
        resolved = index.imports.resolve(node.func) or ""
        if resolved in _TORCH_PROFILERS:
            return Note(node.lineno, f"the script already runs {resolved}() (line {node.lineno}); "
                                     "not nesting emit_itt() inside it")
    return None


def detect(source: Source, label_overrides: Optional[Dict[int, str]] = None) -> Detection:
    """Find the training regions of ``source``; pure, writes nothing."""
    index = _Index(source)
    classifier = _Classifier(index, source.lines)
    notes: List[Note] = []
    found: List[Tuple[_Site, str, str]] = []

    for site in index.loops:
        role = classifier.role(site)
        directive = classifier.directive(site.node)
        if directive == "skip":
            notes.append(Note(site.node.lineno, "skipped: '# autoitt: skip'"))
            continue
        if role is None:
            continue
        if site.compiled:
            notes.append(Note(site.node.lineno, f"{role[0]} loop inside {site.compiled}: compiled code gets no markers; its call site does"))
            continue
        if site.one_line:
            notes.append(Note(site.node.lineno, f"{role[0]} loop with its body on the header line: left alone "
                                                "(put the body on its own line to have it marked)"))
            continue
        found.append((site, role[0], role[1]))

    for site in index.call_sites:
        if index.resolve(site.call, site.function) is not None:
            continue  # a method of this file, e.g. Trainer.fit: its loops are found directly
        if site.compiled:
            continue
        if classifier.directive(site.node) == "skip":
            notes.append(Note(site.node.lineno, "skipped: '# autoitt: skip'"))
            continue
        if site.one_line:
            notes.append(Note(site.node.lineno, f"{dotted(site.call.func)}() on its block's header line: left alone "
                                                "(put it on its own line to have it marked)"))
            continue
        found.append((site, "train-call", f"{dotted(site.call.func)}() trains inside a library"))

    # Calls of compiled functions whose loops were left out are marked at the call site.
    compiled_with_loops: Dict[int, Tuple[_Function, int]] = {}
    for site in index.loops:
        if site.compiled and classifier.role(site) and site.function is not None:
            compiled_with_loops.setdefault(id(site.function.node), (site.function, site.node.lineno))
    if compiled_with_loops:
        for stmt_site in _statement_sites(index):
            for call in index.block_calls([stmt_site.node], enter_loops=True):
                callee = index.resolve(call, stmt_site.function)
                if callee is not None and id(callee.node) in compiled_with_loops and not stmt_site.compiled:
                    stmt_site.call, stmt_site.call_label = call, callee.name
                    found.append((stmt_site, "train-call", f"calls {callee.compiled} {callee.qualname}() whose loops are compiled"))
                    break

    found.sort(key=lambda item: item[0].ordinal)
    regions = _finish(index, found, label_overrides or {})
    return Detection(
        regions=tuple(regions),
        notes=tuple(sorted(notes, key=lambda n: n.line or 0)),
        uses_torch=index.imports.imports("torch"),
        torch_names=tuple(index.imports.names_bound_to("torch")),
        torch_profiler=_torch_profiler(index),
        already_instrumented=_instrumented_by(source, index),
        names_in_use=frozenset(index.names),
        spans=index.spans,
    )


def _statement_sites(index: _Index) -> Iterable[_Site]:
    """Simple statements with their surroundings (only needed for compiled call sites)."""
    sites: List[_Site] = []

    def walk(stmts, function, loops):
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(stmt.body, index.function_of_node.get(id(stmt)), ())
            elif isinstance(stmt, ast.ClassDef):
                walk(stmt.body, function, loops)
            elif not child_blocks(stmt):
                sites.append(_Site(stmt, -1, function, loops, None))
            else:
                inner = loops + (stmt,) if isinstance(stmt, LOOPS) else loops
                for block in child_blocks(stmt):
                    walk(block, function, inner)

    walk(index.tree.body, None, ())
    ordinals = _ordinals(index.tree)
    for site in sites:
        site.ordinal = ordinals[id(site.node)]
    return sites


def _ordinals(tree: ast.Module) -> Dict[int, int]:
    result: Dict[int, int] = {}

    def walk(stmts):
        for stmt in stmts:
            result[id(stmt)] = len(result)
            for block in child_blocks(stmt):
                walk(block)

    walk(tree.body)
    return result


def _finish(index: _Index, found: List[Tuple[_Site, str, str]], overrides: Dict[int, str]) -> List[Region]:
    """Labels (unique per script) and which regions are outermost."""
    region_nodes = {id(site.node) for site, _, _ in found}
    inside = _functions_run_inside(index, [site for site, _, _ in found])

    bases = []
    for site, role, _ in found:
        line = site.call.lineno if site.call is not None else site.node.lineno
        if line in overrides:
            bases.append((overrides[line], True))
        elif role == "train-call":
            bases.append((site.call_label or "fit", False))
        else:
            bases.append((role, False))
    counts: Dict[str, int] = {}
    for base, _ in bases:
        counts[base] = counts.get(base, 0) + 1

    # A repeated label is qualified by its function's name, or by its line when
    # the same function has two such regions (two step loops in main()).
    functions_of: Dict[str, List[Optional[str]]] = {}
    for (site, _, _), (base, _) in zip(found, bases):
        functions_of.setdefault(base, []).append(site.function.qualname if site.function else None)
    labels: List[str] = []
    for (site, _, _), (base, forced) in zip(found, bases):
        qualname = site.function.qualname if site.function else None
        if forced or counts[base] == 1:
            labels.append(base)
        elif qualname is not None and functions_of[base].count(qualname) == 1:
            labels.append(f"{qualname.rsplit('.', 1)[-1]}.{base}")
        else:
            line = site.call.lineno if site.call is not None else site.node.lineno
            labels.append(f"{base}@{line}")
    final_counts: Dict[str, int] = {}
    for label in labels:
        final_counts[label] = final_counts.get(label, 0) + 1

    regions = []
    for (site, role, reason), (base, forced), label in zip(found, bases, labels):
        line = site.call.lineno if site.call is not None else site.node.lineno
        end_line = (site.call.end_lineno if site.call is not None else site.node.end_lineno) or line
        if final_counts[label] > 1:
            label = f"{label}@{line}"
        nested = any(id(loop) in region_nodes for loop in site.loops)
        in_called = site.function is not None and any(id(f.node) in inside for f in site.function.chain())
        kind = "call" if site.call is not None else ("while" if isinstance(site.node, ast.While) else "for")
        regions.append(
            Region(
                line=line,
                end_line=end_line,
                role=role,
                function=site.function.qualname if site.function else None,
                label=label,
                reason=reason,
                ordinal=site.ordinal,
                kind=kind,
                outermost=not nested and not in_called,
            )
        )
    return regions


def _functions_run_inside(index: _Index, sites: List[_Site]) -> Set[int]:
    """Functions that may run while a region is running (so they must not resume/pause)."""
    inside: Set[int] = set()
    region_nodes = {id(site.node) for site in sites}
    for function in index.functions.values():
        if any(id(loop) in region_nodes for loop in function.defined_in_loops):
            inside.add(id(function.node))
    frontier: List[Tuple[_Function, int]] = []
    for site in sites:
        if site.call is not None or any(id(loop) in region_nodes for loop in site.loops):
            continue  # a call trains inside a library; a nested region's calls are its outer region's
        for call in index.block_calls([site.node], enter_loops=True):
            callee = index.resolve(call, site.function)
            if callee is not None:
                frontier.append((callee, CALL_DEPTH))
    while frontier:
        function, depth = frontier.pop()
        if id(function.node) in inside or depth <= 0:
            continue
        inside.add(id(function.node))
        for call in index.function_calls(function, enter_loops=True):
            callee = index.resolve(call, function)
            if callee is not None:
                frontier.append((callee, depth - 1))
    return inside
