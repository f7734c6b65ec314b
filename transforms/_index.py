"""One walk over a script's statements: ordinals, spans, functions, classes, loops, calls, names.

Statement order is shared by the ``ast`` side (detection) and the libcst side
(rewrite): both trees hold the same statements in the same source order, so
the n-th statement of a pre-order walk names the same code in each. This walk
assigns those ordinals (and each compound statement's span) once; detection,
the plan and the rewrite all use them. Every expression node is visited once
here; later questions ("which calls does this loop body make?", "which
function does this call run?") are answered from the per-statement lists.
"""

from __future__ import annotations

import ast
import functools
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from . import _evidence as ev
from ._names import ImportTable, dotted, last_name
from ._parsing import Source

LOOPS = (ast.For, ast.AsyncFor, ast.While)
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def child_blocks(stmt: ast.stmt) -> List[Sequence[ast.stmt]]:
    """The statement lists nested in ``stmt``, in source (and libcst) order."""
    if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.If)):
        return [stmt.body, stmt.orelse]
    if isinstance(stmt, (ast.With, ast.AsyncWith, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.body]
    if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
        return [stmt.body, *[h.body for h in stmt.handlers], stmt.orelse, stmt.finalbody]
    if type(stmt).__name__ == "Match":
        return [case.body for case in stmt.cases]
    return []


class Function:
    """A function or method of the script.

    ``defined_in_loops``: the loops (of the function that defines this one)
    lexically around the definition. A plain class, not a dataclass: making a
    dataclass costs about a millisecond at import, paid by every command.
    """

    __slots__ = ("node", "qualname", "class_qualname", "parent", "compiled", "grad_off", "defined_in_loops")

    def __init__(self, node: ast.AST, qualname: str, class_qualname: Optional[str], parent: Optional["Function"],
                 compiled: Optional[str], grad_off: Optional[str], defined_in_loops: Tuple[ast.AST, ...] = ()) -> None:
        self.node = node
        self.qualname = qualname
        self.class_qualname = class_qualname
        self.parent = parent
        self.compiled = compiled
        self.grad_off = grad_off
        self.defined_in_loops = defined_in_loops

    @property
    def name(self) -> str:
        return self.node.name

    def chain(self) -> Iterable["Function"]:
        function: Optional[Function] = self
        while function is not None:
            yield function
            function = function.parent


class Site:
    """A statement with its surroundings: a loop, a train call, or (for compiled call sites) any statement.

    ``one_line``: the loop's body (or the call's statement) sits on its
    header's line (``for x in y: step(x)``). A plain class, as :class:`Function`.
    """

    __slots__ = ("node", "ordinal", "function", "loops", "grad_off", "call", "call_label", "one_line")

    def __init__(self, node: ast.AST, ordinal: int, function: Optional[Function], loops: Tuple[ast.AST, ...],
                 grad_off: Optional[str], call: Optional[ast.Call] = None, call_label: Optional[str] = None,
                 one_line: bool = False) -> None:
        self.node = node
        self.ordinal = ordinal
        self.function = function
        self.loops = loops
        self.grad_off = grad_off
        self.call = call
        self.call_label = call_label
        self.one_line = one_line

    @property
    def compiled(self) -> Optional[str]:
        for function in self.function.chain() if self.function else ():
            if function.compiled:
                return f"{function.compiled} {function.qualname}"
        return None

    @property
    def line(self) -> int:
        """The region's line: its call's for a train call, else the statement's."""
        return self.call.lineno if self.call is not None else self.node.lineno


def import_statements(stmts: Sequence[ast.stmt]) -> Iterable[ast.AST]:
    """Every import statement, at any depth (a statement-only walk: cheap)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        for block in child_blocks(stmt):
            yield from import_statements(block)


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


class Index:
    """The facts of one walk over ``source``; see the module docstring."""

    def __init__(self, source: Source) -> None:
        self.tree = source.tree
        self.lines = source.lines
        self.imports = ImportTable.from_imports(import_statements(self.tree.body))
        self.functions: Dict[str, Function] = {}
        self.classes: Dict[str, Dict[str, Function]] = {}
        #: class qualname -> the names of its bases (last parts: ``HookBase`` of ``detectron2.engine.HookBase``)
        self.class_bases: Dict[str, List[str]] = {}
        self.loops: List[Site] = []
        #: id(loop) -> the loop sites nested in it, at any depth
        self.nested: Dict[int, List[Site]] = {}
        self.call_sites: List[Site] = []
        #: every simple statement: (statement, ordinal, function, enclosing loops, on its block's header line)
        self.simple: List[Tuple[ast.stmt, int, Optional[Function], Tuple[ast.AST, ...], bool]] = []
        self.mode_switches: Dict[Optional[str], List[Tuple[int, str]]] = {}
        self.calls_of: Dict[int, List[ast.Call]] = {}
        self.all_calls: List[ast.Call] = []
        self.assignments: List[ast.stmt] = []
        self.names: Set[str] = set()
        #: compound statement ordinal -> ordinal just past its last nested statement
        self.spans: Dict[int, int] = {}
        self._ordinal = 0
        self._walk(self.tree.body, None, None, (), None)
        self.bindings = ev.collect_bindings(self.assignments, self.imports, set(self.classes))
        self.method_names: Dict[str, List[Function]] = {}
        for methods in self.classes.values():
            for name, method in methods.items():
                self.method_names.setdefault(name, []).append(method)
        self._block_calls: Dict[Tuple[int, bool], List[ast.Call]] = {}
        self._compile_wrapped_functions()
        #: names bound to objects of this file's model classes (a ``forward`` or Keras ``call`` method)
        self.models: Set[str] = {name for name, cls in self.bindings.instances.items()
                                 if {"forward", "call"} & set(self.classes.get(cls, {}))}
        # and names bound to one of them wrapped (``compiled = torch.compile(model)``): calling it runs the model
        self.models |= {name for name, alias in self.bindings.aliases.items() if dotted(alias.target) in self.models}

    def _compile_wrapped_functions(self) -> None:
        """Mark the functions the script compiles by wrapping (``jit_step = jax.jit(train_step)``)
        as compiled, as ``@jax.jit`` would: their loops run traced, so they get no markers."""
        for alias in self.bindings.aliases.values():
            if alias.compiler is None:
                continue
            function = self.function_named(alias.target)
            if function is not None and function.compiled is None:
                function.compiled = f"{alias.compiler}-compiled"

    def function_named(self, node: ast.AST) -> Optional[Function]:
        """The one function of the file ``node`` can name (``train_step``, ``self.train_step``), if any."""
        if isinstance(node, ast.Name):
            found = self.functions.get(node.id)
            candidates = [found] if found else [f for f in self.functions.values() if f.name == node.id]
        elif isinstance(node, ast.Attribute) and dotted(node.value) in ("self", "cls"):
            candidates = self.method_names.get(node.attr, [])
        else:
            return None
        return candidates[0] if len(candidates) == 1 else None

    def _walk(self, stmts: Sequence[ast.stmt], function: Optional[Function], class_qualname: Optional[str],
              loops: Tuple[ast.AST, ...], grad_off: Optional[str], one_line: bool = False) -> None:
        prefix = function.qualname + "." if function else ""
        for stmt in stmts:
            ordinal = self._ordinal
            self._ordinal += 1
            self._scan(stmt)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{class_qualname}.{stmt.name}" if class_qualname else prefix + stmt.name
                compiled = ev.first(ev.compile_decorator(d, self.imports) for d in stmt.decorator_list)
                no_grad = ev.first(ev.grad_disabled(d, self.imports) for d in stmt.decorator_list)
                info = Function(stmt, qual, class_qualname, function, compiled, no_grad, loops)
                self.functions[qual] = info
                if class_qualname:
                    self.classes.setdefault(class_qualname, {})[stmt.name] = info
                self._walk(stmt.body, info, None, (), None)
                self.spans[ordinal] = self._ordinal
                continue
            if isinstance(stmt, ast.ClassDef):
                qual = f"{class_qualname}.{stmt.name}" if class_qualname else prefix + stmt.name
                self.classes.setdefault(qual, {})
                self.class_bases[qual] = [name for name in map(last_name, stmt.bases) if name]
                self._walk(stmt.body, function, qual, loops, grad_off)
                self.spans[ordinal] = self._ordinal
                continue
            inner_grad_off = grad_off
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    inner_grad_off = ev.grad_disabled(item.context_expr, self.imports) or inner_grad_off
            blocks = child_blocks(stmt)
            if isinstance(stmt, LOOPS):
                site = Site(stmt, ordinal, function, loops, grad_off, one_line=self._one_line(stmt.body))
                self.loops.append(site)
                for outer in loops:
                    self.nested.setdefault(id(outer), []).append(site)
            elif not blocks:
                self._index_simple(stmt, ordinal, function, loops, grad_off, one_line)
            inner_loops = loops + (stmt,) if isinstance(stmt, LOOPS) else loops
            for block in blocks:
                self._walk(block, function, class_qualname, inner_loops, inner_grad_off, self._one_line(block))
            if blocks:
                self.spans[ordinal] = self._ordinal

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

    def _index_simple(self, stmt, ordinal, function, loops, grad_off, one_line) -> None:
        self.simple.append((stmt, ordinal, function, loops, one_line))
        key = function.qualname if function else None
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            switch = ev.mode_switch(stmt.value)
            if switch:
                self.mode_switches.setdefault(key, []).append((stmt.lineno, switch))
        for call in self.calls_of.get(id(stmt), ()):
            label = ev.train_call(call, self.imports)
            if label:
                self.call_sites.append(Site(stmt, ordinal, function, loops, grad_off, call, label, one_line))
                break

    # -- calls ---------------------------------------------------------------------------------

    @functools.cached_property
    def resolved_calls(self) -> List[Tuple[ast.Call, str]]:
        """Every call with the dotted name its callee resolves to through the imports ("" if none)."""
        resolve = self.imports.resolve
        return [(node, resolve(node.func) or "") for node in self.all_calls]

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

    def called_back_by(self, objects: Set[str]) -> Set[int]:
        """id of each function that one of ``objects`` (dotted names) calls back as an event handler:
        decorated with ``@<object>.on(...)`` or given to ``<object>.add_event_handler(event, handler)``
        (pytorch-ignite's engines register handlers so)."""
        found: Set[int] = set()
        if not objects:
            return found
        for function in self.functions.values():
            if any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "on"
                   and dotted(d.func.value) in objects for d in function.node.decorator_list):
                found.add(id(function.node))
        for call in self.all_calls:
            if (isinstance(call.func, ast.Attribute) and call.func.attr == "add_event_handler"
                    and len(call.args) >= 2 and dotted(call.func.value) in objects):
                handler = self.function_named(call.args[1])
                if handler is not None:
                    found.add(id(handler.node))
        return found

    def function_calls(self, function: Function, enter_loops: bool) -> List[ast.Call]:
        key = (id(function.node), enter_loops)
        cached = self._block_calls.get(key)
        if cached is None:
            cached = self._block_calls[key] = self.block_calls(function.node.body, enter_loops)
        return cached

    def resolve(self, call: ast.Call, function: Optional[Function], depth: int = 3) -> Optional[Function]:
        """The same-file function or method a call runs, when it can be told.

        A name bound to a wrapped function (``p_train_step = jax.pmap(train_step)``,
        ``step = functools.partial(train_step, ...)``) runs the function it wraps, up to
        ``depth`` wrappings deep.
        """
        found = self._resolve(call, function)
        if found is None and depth > 0 and self.bindings.aliases:
            alias = self.bindings.aliases.get(dotted(call.func) or "")
            if alias is not None:
                return self.resolve(ast.Call(func=alias.target, args=[], keywords=[]), function, depth - 1)
        return found

    def _resolve(self, call: ast.Call, function: Optional[Function]) -> Optional[Function]:
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
        if func.attr in ("run", "experimental_run_v2") and call.args and "strategy" in (last_name(func.value) or "").lower():
            # tf.distribute: strategy.run(step_fn, args=...) runs step_fn on each replica
            return self._resolve(ast.Call(func=call.args[0], args=[], keywords=[]), function)
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

    def _method(self, class_qualname: str, name: str, depth: int = 8) -> Optional[Function]:
        """The class's method ``name``: its own, else the nearest of its bases' in this file."""
        found = self.classes.get(class_qualname, {}).get(name)
        if found is not None or depth <= 0:
            return found
        for base in self.class_bases.get(class_qualname, ()):
            for candidate in self._classes_named(base):
                found = self._method(candidate, name, depth - 1)
                if found is not None:
                    return found
        return None

    def _classes_named(self, name: str) -> List[str]:
        return [qual for qual in self.classes if qual.rsplit(".", 1)[-1] == name]

    def overrides(self, method: Function) -> List[Function]:
        """The methods of this file's subclasses (at any depth) that override ``method``: a call through
        ``self`` may run any of them (a trainer base's ``self.run_step()``, run by a subclass's)."""
        owner = method.class_qualname
        if owner is None:
            return []
        found: List[Function] = []
        seen = {owner}
        frontier = [owner]
        while frontier:
            short = frontier.pop().rsplit(".", 1)[-1]
            for qual, bases in self.class_bases.items():
                if short in bases and qual not in seen:
                    seen.add(qual)
                    frontier.append(qual)
                    override = self.classes.get(qual, {}).get(method.name)
                    if override is not None:
                        found.append(override)
        return found

    def simple_sites(self) -> List[Site]:
        """Every simple statement as a :class:`Site` (only needed for compiled call sites)."""
        return [Site(stmt, ordinal, function, loops, None, one_line=one_line)
                for stmt, ordinal, function, loops, one_line in self.simple]
