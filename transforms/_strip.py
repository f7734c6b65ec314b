"""Taking autoitt's markers out again: the inverse of the rewrite.

A marker is a statement calling the copy's ITT name (``itt.task_begin``,
``itt.resume`` ...) or PyTorch's ITT range (``torch.profiler.itt.range_push``);
autoitt wraps code as ``markers; try: [with emit_itt():] code finally: markers``.
Stripping replaces each such wrapping with the code it wraps, gives back the
leading comments and blank lines the first marker carried, and drops the
header (the ittapi import and the ``_autoitt_*`` objects). Since the rewrite
nests the user's own nodes unchanged, the result is the original source byte
for byte; every rewrite is checked that way, on the bytes, before anything
is written.
"""

from __future__ import annotations

from typing import AbstractSet, List, Optional, Sequence

import libcst as cst
import libcst.matchers as m

from ._detect import INSTRUMENTED_MARKER
from ._errors import RewriteError, SourceError
from ._plan import DOMAIN_VAR, ITT_MODULE, WINDOW_CLASS, WINDOW_MODULE

_ITT_CALLS = ("resume", "pause", "task_begin", "task_end", "pt_region_begin", "pt_region_end")


def _itt_name(module: cst.Module) -> Optional[str]:
    """The name the copy imported ``ittapi.compat`` under (``itt``), if it is an autoitt copy."""
    for statement in module.body:
        if m.matches(statement, m.SimpleStatementLine(body=[m.Import()])):
            for alias in statement.body[0].names:
                if (cst.Module([]).code_for_node(alias.name) == ITT_MODULE and alias.asname is not None
                        and isinstance(alias.asname.name, cst.Name)):
                    return alias.asname.name.value
    return None


def _domain_var(module: cst.Module, itt: str) -> str:
    """The module-level name the copy's domain is bound to (``_autoitt_domain`` unless taken)."""
    for statement in module.body:
        if m.matches(statement, m.SimpleStatementLine(body=[m.Assign(
                targets=[m.AssignTarget(target=m.Name())],
                value=m.Call(func=m.Attribute(value=m.Name(itt), attr=m.Name("domain_create"))))])):
            return statement.body[0].targets[0].target.value
    return DOMAIN_VAR


class _MarkerStripper(cst.CSTTransformer):
    """Unwraps marker wrappings in every statement list, bottom up."""

    def __init__(self, itt: str, domain: str, untouched: AbstractSet[int] = frozenset()) -> None:
        super().__init__()
        self._untouched = untouched
        itt_call = m.Call(func=m.Attribute(value=m.Name(itt), attr=m.OneOf(*(m.Name(n) for n in _ITT_CALLS))))
        torch_range = m.Call(func=m.Attribute(
            value=m.Attribute(value=m.Attribute(value=m.Name(), attr=m.Name("profiler")), attr=m.Name("itt")),
            attr=m.Name("range_push") | m.Name("range_pop"),
        ))
        self._marker = m.SimpleStatementLine(body=[m.Expr(value=itt_call | torch_range)])
        self._task = m.SimpleStatementLine(body=[m.Expr(value=m.Call(
            func=m.Attribute(value=m.Name(itt), attr=m.Name("task_begin") | m.Name("task_end")),
            args=[m.Arg(value=m.Name(domain)), m.ZeroOrMore()],
        ))])
        self._emit_itt = m.With(items=[m.WithItem(item=m.Call(func=m.Attribute(
            value=m.Attribute(value=m.Attribute(value=m.Name(), attr=m.Name("autograd")), attr=m.Name("profiler")),
            attr=m.Name("emit_itt"),
        ), args=[]), asname=None)])

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self._untouched:
            return False
        return isinstance(node, (cst.Module, cst.BaseCompoundStatement, cst.IndentedBlock, cst.Else,
                                 cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase))

    def leave_IndentedBlock(self, original_node, updated_node):
        return self._unwrap_in(updated_node)

    def leave_Module(self, original_node, updated_node):
        return self._unwrap_in(updated_node)

    def _unwrap_in(self, node):
        # Every wrapping holds a try statement: most blocks are done with one cheap look.
        if not any(isinstance(statement, cst.Try) for statement in node.body):
            return node
        body, footer = self._unwrap(node.body)
        return node.with_changes(body=body, footer=[*footer, *node.footer])

    def _is_marker(self, statement: cst.CSTNode) -> bool:
        # isinstance first: the matcher only runs on one-call expression statements
        return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call)
                and m.matches(statement, self._marker))

    def _is_wrapping_try(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Try) or node.handlers or node.orelse or node.finalbody is None:
            return False
        final = node.finalbody.body.body
        return bool(final) and all(self._is_marker(s) for s in final) and any(
            m.matches(s, self._task) for s in final)

    def _unwrap(self, statements: Sequence[cst.BaseStatement]):
        """Replace ``markers...; try: X finally: markers`` runs by X; returns (body, footer moved up)."""
        result: List[cst.BaseStatement] = []
        footer: List[cst.EmptyLine] = []
        index = 0
        while index < len(statements):
            run_end = index
            while run_end < len(statements) and self._is_marker(statements[run_end]):
                run_end += 1
            run = statements[index:run_end]
            if (run and run_end < len(statements) and any(m.matches(s, self._task) for s in run)
                    and self._is_wrapping_try(statements[run_end])):
                guarded = statements[run_end]
                inner = list(guarded.body.body)
                if len(inner) == 1 and m.matches(inner[0], self._emit_itt):
                    with_block = inner[0].body
                    inner = list(with_block.body)
                leading = [*run[0].leading_lines, *inner[0].leading_lines] if inner else []
                if inner:
                    inner[0] = inner[0].with_changes(leading_lines=leading)
                result.extend(inner)
                if run_end == len(statements) - 1:
                    footer = list(guarded.body.footer)
                index = run_end + 1
                continue
            result.append(statements[index])
            index += 1
        return result, footer


def _is_header(statement: cst.CSTNode, itt: str) -> bool:
    """One of autoitt's header statements: the ittapi or window import, or an assignment
    of ``<itt>.domain_create(...)``, ``<itt>.pt_region_create(...)`` or ``CollectionWindow(...)``."""
    if m.matches(statement, m.SimpleStatementLine(body=[m.Import()])):
        names = [cst.Module([]).code_for_node(a.name) for a in statement.body[0].names]
        return names == [ITT_MODULE]
    if m.matches(statement, m.SimpleStatementLine(body=[m.ImportFrom()])):
        small = statement.body[0]
        module = cst.Module([]).code_for_node(small.module) if small.module else ""
        return module == WINDOW_MODULE and not isinstance(small.names, cst.ImportStar) and [
            a.name.value for a in small.names] == [WINDOW_CLASS]
    return m.matches(statement, m.SimpleStatementLine(body=[m.Assign(
        targets=[m.AssignTarget(target=m.Name())],
        value=m.Call(func=m.Attribute(value=m.Name(itt), attr=m.Name("domain_create") | m.Name("pt_region_create"))
                     | m.Name(WINDOW_CLASS)),
    )]))


def _without_header(body: Sequence[cst.BaseStatement], itt: str) -> List[cst.BaseStatement]:
    """``body`` without the run of header statements that starts at the ittapi import.

    Only that run goes: a statement of the user's elsewhere that happens to
    look alike (``_autoitt_domain = 1``) stays.
    """
    start = next((i for i, s in enumerate(body) if _is_header(s, itt)
                  and m.matches(s, m.SimpleStatementLine(body=[m.Import()]))), None)
    if start is None:
        return list(body)
    end = start + 1
    while end < len(body) and _is_header(body[end], itt):
        end += 1
    return [*body[:start], *body[end:]]


def strip_module(module: cst.Module, untouched: AbstractSet[int] = frozenset()) -> cst.Module:
    """``module`` without autoitt's header and markers.

    ``untouched``: ids of subtrees known to hold no markers (the rewrite's own
    list), which need not be visited.
    """
    itt = _itt_name(module)
    if itt is None:
        raise RewriteError("no 'import ittapi.compat as ...' header: not an autoitt copy")
    stripped = module.visit(_MarkerStripper(itt, _domain_var(module, itt), untouched))
    return stripped.with_changes(body=_without_header(stripped.body, itt))


def _leftover_lines(code: str, itt: str, domain: str) -> List[int]:
    return [number for number, line in enumerate(code.splitlines(), start=1)
            if domain in line or line.lstrip().startswith(f"{itt}.")]


def strip_markers(data: bytes, name: str) -> bytes:
    """The original source of an autoitt copy: its markers and header removed.

    Raises :class:`SourceError` when ``data`` is not an autoitt copy, cannot be
    parsed, or still holds markers after stripping (edited by hand).
    """
    from ._parsing import parse_source

    source = parse_source(data, name)
    if INSTRUMENTED_MARKER not in source.text:
        raise SourceError(name, "not instrumented by autoitt (no '# autoitt: instrumented' header)")
    module = cst.parse_module(data)
    try:
        stripped = strip_module(module)
    except RewriteError as exc:
        raise SourceError(name, str(exc)) from None
    itt = _itt_name(module) or "itt"
    leftovers = _leftover_lines(stripped.code, itt, _domain_var(module, itt))
    if leftovers:
        raise SourceError(name, "markers autoitt did not write this way remain after stripping "
                                "(was the copy edited by hand?)", leftovers[0])
    return stripped.bytes
