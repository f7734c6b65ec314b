"""The marker vocabulary: every name, statement and shape of the code autoitt inserts.

The grammar is written once, here. :class:`Markers` *builds* the inserted
statements as code text (the plan holds that text, the rewrite parses it);
:class:`MarkerMatcher` *recognises* them in a parsed copy (``strip``, and so
the safety check, use it); :data:`INSTRUMENTED_MARKER` and the ITT bindings
below tell detection that a script is instrumented already. A copy looks
like this, and like nothing else::

    import ittapi.compat as itt                       # ITT_MODULE, under a free name
    from instrumenter.runtime.collection import Collection as _autoitt_Collection  # RUNTIME_MODULE (windowed:
                                                      # WINDOW_MODULE's CollectionWindow)
    # autoitt: instrumented copy of train.py; ...     # INSTRUMENTED_MARKER
    itt = _autoitt_Collection(itt)                    # (itt = _autoitt_CollectionWindow(itt, skip_steps=N, ...);
                                                      # --torch-ops sampled: Collection(itt, operators_in=(...)))
    _autoitt_domain = itt.domain_create("autoitt.train")
    [_autoitt_pt_0 = itt.pt_region_create("step")]
    ...
    itt.resume()                                      # markers: one call each, on their own line
    itt.task_begin(_autoitt_domain, "epoch_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            <the user's statement>
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()

Building is pure text and imports nothing; matching needs libcst nodes and
imports libcst only when a matcher is made, so detection and planning stay
quick to start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional, Tuple

if TYPE_CHECKING:
    import libcst as cst

#: The ITT binding the markers call (NERSC itt-python's API, shipped by ittapi).
ITT_MODULE = "ittapi.compat"
#: Names the copy may bind ``ittapi.compat`` to, in order of preference (the first the script does not use).
ITT_NAMES = ("itt", "_autoitt_itt")
#: The module-level name of the copy's ITT domain (numbered when the script uses it).
DOMAIN_VAR = "_autoitt_domain"
#: The module-level names of anomaly-detection regions, numbered from 0.
PT_REGION_VAR = "_autoitt_pt_{}"
#: Text autoitt puts in every copy it writes; its presence means "already instrumented".
INSTRUMENTED_MARKER = "# autoitt: instrumented"
#: The runtime a copy binds ``itt`` to (counted collection control, string handles made
#: once), and the one a windowed copy (``--skip-steps``/``--steps``) uses instead: modules
#: of autoitt's own package, so a copy needs autoitt installed where it runs.
RUNTIME_PACKAGE = "instrumenter.runtime"
RUNTIME_MODULE = f"{RUNTIME_PACKAGE}.collection"
RUNTIME_CLASS = "Collection"
WINDOW_MODULE = f"{RUNTIME_PACKAGE}.window"
WINDOW_CLASS = "CollectionWindow"
#: The package a copy that autoitt's launcher runs (``autoitt profile``) imports the same modules from: the
#: launcher provides autoitt's runtime under this name (``instrumenter/launch/__main__.py``), which no package
#: of the user's can shadow (``_autoitt`` names are autoitt's in every copy), while an ``instrumenter`` of the
#: user's stays theirs.
LAUNCHED_RUNTIME_PACKAGE = "_autoitt"
#: The package copies made before the runtime had its own imported the same modules from (``instrumenter``
#: keeps those names: ``instrumenter/runtime/collection.py``, ``window.py``); their runtime imports are still recognised.
EARLIER_RUNTIME_PACKAGE = "instrumenter"
#: The name the copy binds the runtime class to (numbered when the script uses it): never a
#: name of the script's, such as ``Collection`` from ``typing``.
RUNTIME_ALIASES = {RUNTIME_CLASS: "_autoitt_Collection", WINDOW_CLASS: "_autoitt_CollectionWindow"}

#: The ITT bindings a hand-instrumented script imports (intel/ittapi, NERSC itt-python), and the
#: calls that mark it as instrumented by hand (see ``transforms._detect``).
ITTAPI_PACKAGE = "ittapi"
ITT_PYTHON_MODULE = "itt"
HAND_MARKER_CALLS = ("task_begin", "resume", "domain_create")
#: The ittapi.compat calls markers make (one statement each).
MARKER_CALLS = ("resume", "pause", "task_begin", "task_end", "pt_region_begin", "pt_region_end")
#: The calls of header assignments: ``<var> = <itt>.<call>(...)``.
HEADER_CALLS = ("domain_create", "pt_region_create")
#: PyTorch's own ITT range (on its ``PyTorch`` domain): ``<torch>.profiler.itt.range_push/range_pop``.
TORCH_RANGE = ("profiler", "itt")
TORCH_RANGE_CALLS = ("range_push", "range_pop")
#: ``<torch>.autograd.profiler.emit_itt()``: every PyTorch operator becomes an ITT task.
EMIT_ITT = ("autograd", "profiler", "emit_itt")
#: ``with <itt>.library(<object>, "<method>", <domain>[, "<role>"]):`` around a library call: the copy's
#: runtime (instrumenter.runtime.libraries) has the library call back into epoch, step and eval tasks; the role
#: (``train``/``eval``) is given where the method's name does not say it (an ignite engine's ``run``).
LIBRARY_CALL = "library"
#: The methods whose callbacks it covers (Keras fit/evaluate/predict, Lightning fit/validate/test/predict,
#: Hugging Face train/evaluate/predict, Stable-Baselines3 learn): those that train, those that evaluate or predict (which
#: detection also takes as eval calls), and the task name of the training ones' steps
#: (instrumenter.runtime.libraries.STEP).
LIBRARY_TRAINING = ("fit", "train", "learn")
LIBRARY_EVALUATION = ("evaluate", "validate", "test", "predict")
LIBRARY_METHODS = LIBRARY_TRAINING + LIBRARY_EVALUATION
LIBRARY_STEP = "step"
#: ... and of the evaluation iterations a library's calls run (instrumenter.runtime.libraries.EVAL).
LIBRARY_EVAL = "eval"
#: A library call's region role -> the role its ``library(...)`` context is given, where the method's name
#: does not say it (instrumenter.runtime.libraries.ROLES).
LIBRARY_ROLES = {"train-call": "train", "eval": "eval"}


def quote(text: str) -> str:
    """A double-quoted Python literal for any text (JSON's escapes are valid Python ones)."""
    return json.dumps(text)


def quote_all(texts: Tuple[str, ...]) -> str:
    """A parenthesised tuple literal of :func:`quote`'d texts (``("step",)`` for one)."""
    return "(" + ", ".join(quote(text) for text in texts) + ("," if len(texts) == 1 else "") + ")"


def free_name(candidates: Tuple[str, ...], names_in_use: Iterable[str]) -> str:
    """The first candidate the script does not use, else the last one numbered until free."""
    used = set(names_in_use)
    for name in candidates:
        if name not in used:
            return name
    number = 2
    while f"{candidates[-1]}_{number}" in used:
        number += 1
    return f"{candidates[-1]}_{number}"


@dataclass(frozen=True)
class Markers:
    """The statements of one copy, as code text: ``itt`` and ``domain`` are the names it binds.

    ``torch`` is the name PyTorch is imported under when the copy wraps
    training in ``emit_itt()``, else ``None``.
    """

    itt: str = ITT_NAMES[0]
    domain: str = DOMAIN_VAR
    torch: Optional[str] = None
    #: the copy's name for its runtime class (see :data:`RUNTIME_ALIASES`)
    runtime: str = RUNTIME_ALIASES[RUNTIME_CLASS]
    #: the package the copy imports the runtime from (:data:`RUNTIME_PACKAGE` or :data:`LAUNCHED_RUNTIME_PACKAGE`)
    runtime_package: str = RUNTIME_PACKAGE

    def _call(self, function: str, *args: str) -> str:
        return f"{self.itt}.{function}({', '.join(args)})"

    # -- markers: one statement each ------------------------------------------------------------

    def resume(self) -> str:
        return self._call("resume")

    def pause(self) -> str:
        return self._call("pause")

    def task_begin(self, label: str) -> str:
        return self._call("task_begin", self.domain, quote(label))

    def task_end(self) -> str:
        return self._call("task_end", self.domain)

    def pt_region_begin(self, region_var: str) -> str:
        return self._call("pt_region_begin", region_var)

    def pt_region_end(self, region_var: str) -> str:
        return self._call("pt_region_end", region_var)

    def range_push(self, name: str) -> str:
        return f"{self.torch}.{'.'.join(TORCH_RANGE)}.{TORCH_RANGE_CALLS[0]}({quote(name)})"

    def range_pop(self) -> str:
        return f"{self.torch}.{'.'.join(TORCH_RANGE)}.{TORCH_RANGE_CALLS[1]}()"

    def emit_itt(self) -> str:
        """The context expression PyTorch training runs inside: not entered again where PyTorch's
        profiler already runs on the thread (a region re-entered by a generator or a coroutine, the
        script's own profiler), which would raise."""
        return f"{self.torch}.{'.'.join(EMIT_ITT)}(enabled=not {self.torch}.autograd._profiler_enabled())"

    def library(self, receiver: str, method: str, role: Optional[str] = None) -> str:
        """The context expression a library call runs inside, so its epochs, steps and evals are tasks;
        ``role`` (``train``/``eval``) where the method's name does not say it (an engine's ``run``)."""
        if role is None:
            return self._call(LIBRARY_CALL, receiver, quote(method), self.domain)
        return self._call(LIBRARY_CALL, receiver, quote(method), self.domain, quote(role))

    # -- the header ------------------------------------------------------------------------------

    def imports(self, windowed: bool) -> Tuple[Tuple[str, Optional[str], Optional[str]], ...]:
        """(module, name-or-None, asname-or-None) of each import: ittapi, then the runtime."""
        module, name = (WINDOW_MODULE, WINDOW_CLASS) if windowed else (RUNTIME_MODULE, RUNTIME_CLASS)
        module = self.runtime_package + module[len(RUNTIME_PACKAGE):]
        return (ITT_MODULE, None, self.itt), (module, name, self.runtime)

    def header_comment(self, source_name: str) -> str:
        # One line of text in any encoding: a file name with a newline or undecodable bytes is escaped.
        shown = source_name if source_name.isprintable() and source_name.isascii() else ascii(source_name)
        return (f"{INSTRUMENTED_MARKER} copy of {shown}; "
                f"the markers are the lines using {self.itt} and _autoitt_*")

    def collection(self, operators_in: Tuple[str, ...] = ()) -> str:
        """The ``itt`` binding; ``operators_in``: the iteration tasks whose sampled iterations record PyTorch's
        operators (``--torch-ops sampled``)."""
        if not operators_in:
            return f"{self.itt} = {self.runtime}({self.itt})"
        return f"{self.itt} = {self.runtime}({self.itt}, operators_in={quote_all(operators_in)})"

    def window(self, skip_steps: int, steps: Optional[int], step_tasks: Tuple[str, ...]) -> str:
        return (f"{self.itt} = {self.runtime}({self.itt}, skip_steps={skip_steps}, steps={steps}, "
                f"step_tasks={quote_all(step_tasks)})")

    def domain_create(self, name: str) -> str:
        return f"{self.domain} = {self._call(HEADER_CALLS[0], quote(name))}"

    def pt_region_create(self, region_var: str, label: str) -> str:
        return f"{region_var} = {self._call(HEADER_CALLS[1], quote(label))}"


# -- recognising the markers in a parsed copy ----------------------------------------------------

def dotted(node: "cst.CSTNode") -> Optional[str]:
    """``a.b.c`` for a libcst chain of attribute accesses on a name, else ``None``."""
    import libcst as cst

    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _single(statement: "cst.CSTNode", kind: type) -> Optional["cst.CSTNode"]:
    """The one small statement of a statement line, when it is of ``kind``."""
    import libcst as cst

    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            and isinstance(statement.body[0], kind):
        return statement.body[0]
    return None


def _receiver_and_path(func: "cst.CSTNode", length: int) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """``torch.profiler.itt.range_push`` -> ("torch", ("profiler", "itt", "range_push")) for a chain of ``length``."""
    name = dotted(func)
    parts = name.split(".") if name else []
    return (parts[0], tuple(parts[1:])) if len(parts) == length else None


def itt_import_name(module: "cst.Module") -> Optional[str]:
    """The name a copy binds ``ittapi.compat`` to (``itt``), or ``None`` when it has no such import.

    A copy of a script that imports ``ittapi.compat`` itself holds two such
    imports: the copy's is the one its runtime wraps (``itt = _autoitt_Collection(itt)``).
    Copies made before the runtime existed hold only their own.
    """
    import libcst as cst

    names = []
    for statement in module.body:
        small = _single(statement, cst.Import)
        for alias in small.names if small is not None else ():
            if (dotted(alias.name) == ITT_MODULE and alias.asname is not None
                    and isinstance(alias.asname.name, cst.Name)):
                names.append(alias.asname.name.value)
    if len(names) > 1:
        runtimes = set(_runtime_names(module))
        for statement in module.body:
            target, call = _assigned_name(statement), _assigned_call(statement)
            if (target in names and call is not None and dotted(call.func) in runtimes and call.args
                    and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == target):
                return target
    return names[0] if names else None


class MarkerMatcher:
    """Recognises the markers and header of one copy, whose ``ittapi.compat`` is bound to ``itt``.

    Plain ``isinstance`` checks on the few node shapes the vocabulary has
    (libcst's matchers module costs more to import than the whole rewrite).
    """

    def __init__(self, itt: str, domain: str, runtime: Tuple[str, ...] = ()) -> None:
        import libcst as cst

        self._cst = cst
        self.itt = itt
        self.domain = domain
        #: the names the copy's header binds runtime classes to (earlier copies: the class's own name,
        #: as their import says); never a name merely spelled like one (a script's own ``Collection``)
        self.runtime = frozenset(runtime)

    @classmethod
    def for_copy(cls, module: "cst.Module") -> Optional["MarkerMatcher"]:
        """The matcher for ``module``, or ``None`` when it does not import ``ittapi.compat`` under a name."""
        itt = itt_import_name(module)
        if itt is None:
            return None
        domain = DOMAIN_VAR
        for statement in module.body:
            target = _assigned_name(statement)
            call = _assigned_call(statement)
            if target is not None and call is not None and dotted(call.func) == f"{itt}.{HEADER_CALLS[0]}":
                domain = target
                break
        return cls(itt, domain, tuple(_runtime_names(module)))

    def _call(self, statement: "cst.CSTNode") -> Optional["cst.Call"]:
        expr = _single(statement, self._cst.Expr)
        return expr.value if expr is not None and isinstance(expr.value, self._cst.Call) else None

    def is_marker(self, statement: "cst.CSTNode") -> bool:
        """A statement line that is one marker call: an ittapi.compat call or PyTorch's ITT range."""
        call = self._call(statement)
        if call is None:
            return False
        name = dotted(call.func)
        if name is not None and name.startswith(self.itt + ".") and name[len(self.itt) + 1:] in MARKER_CALLS:
            return True
        chain = _receiver_and_path(call.func, 4)
        return chain is not None and chain[1][:2] == TORCH_RANGE and chain[1][2] in TORCH_RANGE_CALLS

    def is_task_marker(self, statement: "cst.CSTNode") -> bool:
        """``<itt>.task_begin(<domain>, ...)`` or ``<itt>.task_end(<domain>)``."""
        call = self._call(statement)
        return (call is not None and dotted(call.func) in (f"{self.itt}.task_begin", f"{self.itt}.task_end")
                and bool(call.args) and isinstance(call.args[0].value, self._cst.Name)
                and call.args[0].value.value == self.domain)

    def is_marker_with(self, statement: "cst.CSTNode") -> bool:
        """The ``with`` a wrapping may hold: every item is ``<torch>.autograd.profiler.emit_itt(enabled=...)``
        (or with no argument, as earlier copies have it) or ``<itt>.library(...)``, bound to nothing."""
        cst = self._cst
        if not isinstance(statement, cst.With) or not statement.items:
            return False
        return all(item.asname is None and isinstance(item.item, cst.Call)
                   and (self._is_emit_itt(item.item) or self._is_library(item.item)) for item in statement.items)

    def _is_emit_itt(self, call: "cst.Call") -> bool:
        args = call.args
        if args and not (len(args) == 1 and args[0].keyword is not None and args[0].keyword.value == "enabled"):
            return False
        chain = _receiver_and_path(call.func, 4)
        return chain is not None and chain[1] == EMIT_ITT

    def _is_library(self, call: "cst.Call") -> bool:
        return (dotted(call.func) == f"{self.itt}.{LIBRARY_CALL}" and len(call.args) in (3, 4)
                and isinstance(call.args[2].value, self._cst.Name) and call.args[2].value.value == self.domain
                and (len(call.args) == 3 or isinstance(call.args[3].value, self._cst.SimpleString)))

    def is_wrapping_try(self, node: "cst.CSTNode") -> bool:
        """``try: ... finally: <markers>`` with at least one task marker, and nothing else."""
        if not isinstance(node, self._cst.Try) or node.handlers or node.orelse or node.finalbody is None:
            return False
        final = node.finalbody.body.body
        return bool(final) and all(self.is_marker(s) for s in final) and any(self.is_task_marker(s) for s in final)

    def is_itt_import(self, statement: "cst.CSTNode") -> bool:
        """``import ittapi.compat as <itt>``: the copy's own, not one of the script's."""
        small = _single(statement, self._cst.Import)
        if small is None or [dotted(a.name) for a in small.names] != [ITT_MODULE]:
            return False
        asname = small.names[0].asname
        return asname is not None and isinstance(asname.name, self._cst.Name) and asname.name.value == self.itt

    def is_header(self, statement: "cst.CSTNode") -> bool:
        """One of the header's statements: the ittapi or window import, or an assignment of
        ``<itt>.domain_create(...)``, ``<itt>.pt_region_create(...)`` or ``CollectionWindow(...)``."""
        if self.is_itt_import(statement):
            return True
        cst = self._cst
        small = _single(statement, cst.ImportFrom)
        if small is not None:
            module = dotted(small.module) if small.module is not None else None
            return (not isinstance(small.names, cst.ImportStar)
                    and (module, [dotted(a.name) for a in small.names]) in _RUNTIME_IMPORTS)
        call = _assigned_call(statement)
        if _assigned_name(statement) is None or call is None:
            return False
        name = dotted(call.func)
        return name in self.runtime or name in (f"{self.itt}.{c}" for c in HEADER_CALLS)


_RUNTIME_IMPORTS = tuple((package + module[len(RUNTIME_PACKAGE):], [name])
                         for package in (RUNTIME_PACKAGE, LAUNCHED_RUNTIME_PACKAGE, EARLIER_RUNTIME_PACKAGE)
                         for module, name in ((RUNTIME_MODULE, RUNTIME_CLASS), (WINDOW_MODULE, WINDOW_CLASS)))


def _runtime_names(module: "cst.Module"):
    """The names a copy's ``from <runtime module> import <class> [as <name>]`` statements bind."""
    import libcst as cst

    for statement in module.body:
        small = _single(statement, cst.ImportFrom)
        if small is None or small.module is None or isinstance(small.names, cst.ImportStar):
            continue
        for alias in small.names:
            if (dotted(small.module), [dotted(alias.name)]) in _RUNTIME_IMPORTS:
                asname = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(asname, cst.Name):
                    yield asname.value


def _assigned_name(statement: "cst.CSTNode") -> Optional[str]:
    """``x`` of a statement line ``x = ...`` with one plain name as its only target."""
    import libcst as cst

    assign = _single(statement, cst.Assign)
    if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    return assign.targets[0].target.value


def _assigned_call(statement: "cst.CSTNode") -> Optional["cst.Call"]:
    import libcst as cst

    assign = _single(statement, cst.Assign)
    return assign.value if assign is not None and isinstance(assign.value, cst.Call) else None
