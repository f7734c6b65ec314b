"""What a script does with ITT itself: its own markers, domains and profilers.

A script that imports ``ittapi`` (or NERSC's ``itt``) or calls ITT is
instrumented by hand; an autoitt copy says so in its header. Detection keeps
such a script's own markers in charge: autoitt marks only regions that cannot
cross them (:func:`crossing_own_markers`), and leaves resume/pause to the
script. Pure functions over an :class:`~transforms._index.Index`.
"""

from __future__ import annotations

import ast
from typing import Iterator, List, Optional, Sequence, Tuple

from ._index import Function, Index, Site, import_statements
from ._markers import HAND_MARKER_CALLS, INSTRUMENTED_MARKER, ITT_PYTHON_MODULE, ITTAPI_PACKAGE
from ._names import dotted
from ._parsing import Source


def crossing_own_markers(index: Index, sites: Sequence[Site]) -> List[Tuple[Site, str]]:
    """The sites whose markers could cross the script's own, each with what it holds.

    A site is clear when none of the script's ITT calls (ittapi's, itt-python's,
    ``torch.profiler.itt``'s) is inside it, nor in a function of this file it
    calls. Tasks then nest whichever way the script's own are placed:
    autoitt's wrap whole statements, the script's sit outside them or inside
    functions they call.
    """
    own = [node for node, resolved in index.resolved_calls if _is_itt(resolved)]
    if not own:
        return []
    bearing = {id(function.node) for function in _functions_holding(index, own)}
    crossing: List[Tuple[Site, str]] = []
    for site in sites:
        start, end = site.node.lineno, site.node.end_lineno or site.node.lineno
        inside = next((node for node in own if start <= node.lineno <= end), None)
        if inside is not None:
            crossing.append((site, f"{dotted(inside.func)}() at line {inside.lineno}"))
            continue
        called = next((callee for call in index.block_calls([site.node], enter_loops=True)
                       for callee in [index.resolve(call, site.function)]
                       if callee is not None and id(callee.node) in bearing), None)
        if called is not None:
            crossing.append((site, f"{called.qualname}(), which makes ITT calls"))
    return crossing


def _is_itt(resolved: str) -> bool:
    head = resolved.rpartition(".")[0]
    return (head.startswith(ITTAPI_PACKAGE) or head == ITT_PYTHON_MODULE
            or head.endswith(".profiler.itt") and head.split(".")[0] == "torch")


def _functions_holding(index: Index, calls: List[ast.Call]) -> List[Function]:
    """The functions of this file whose own bodies hold any of ``calls``."""
    lines = [node.lineno for node in calls]
    return [f for f in index.functions.values()
            if any(f.node.lineno <= line <= (f.node.end_lineno or f.node.lineno) for line in lines)]


def instrumented_by(source: Source, index: Index) -> Optional[str]:
    """``autoitt`` for an autoitt copy, ``hand (...)`` naming the import or call for a script with ITT of its
    own, else ``None``."""
    if INSTRUMENTED_MARKER in source.text:
        return "autoitt"
    for node in import_statements(index.tree.body):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if any(name == ITT_PYTHON_MODULE or name.split(".")[0] == ITTAPI_PACKAGE for name in modules):
            return f"hand (imports {modules[0]} at line {node.lineno})"
    for node, resolved in index.resolved_calls:
        head, _, tail = resolved.rpartition(".")
        if tail in HAND_MARKER_CALLS and (head.startswith(ITTAPI_PACKAGE) or head == ITT_PYTHON_MODULE):
            return f"hand ({dotted(node.func)}() at line {node.lineno})"
    return None


def itt_calls(index: Index, function: str) -> Iterator[ast.Call]:
    """The script's calls of ITT's ``function`` (ittapi's, itt-python's, or a copy's ``itt``)."""
    for node, resolved in index.resolved_calls:
        head, _, tail = resolved.rpartition(".")
        if tail == function and (head.startswith(ITTAPI_PACKAGE) or head == ITT_PYTHON_MODULE):
            yield node


def calls_itt(index: Index, function: str) -> bool:
    return next(itt_calls(index, function), None) is not None


def own_domains(index: Index) -> Tuple[str, ...]:
    """The ITT domains the script's own calls create, where their names are written out."""
    names = [node.args[0].value for node in itt_calls(index, "domain_create")
             if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]
    return tuple(dict.fromkeys(names))


_TORCH_PROFILERS = frozenset((
    "torch.profiler.profile",
    "torch.autograd.profiler.profile",
    "torch.autograd.profiler.emit_itt",
    "torch.autograd.profiler.emit_nvtx",
    "torch.autograd.profiler_legacy.profile",
))


def torch_profiler_call(index: Index) -> Optional[Tuple[int, str]]:
    """(line, what) of the script's first call that runs a PyTorch profiler, if any."""
    for node, resolved in index.resolved_calls:
        if resolved in _TORCH_PROFILERS:
            return node.lineno, resolved
    return None
