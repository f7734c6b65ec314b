"""Taking autoitt's markers out again: the inverse of the rewrite.

What a marker, a wrapping and a header statement look like is the marker
vocabulary's (:class:`~transforms._markers.MarkerMatcher`); autoitt wraps code
as ``markers; try: [with emit_itt(), itt.library(...):] code finally: markers``. Stripping
replaces each such wrapping with the code it wraps, gives back the leading
comments and blank lines the first marker carried, and drops the header (the
ittapi import and the ``_autoitt_*`` objects). Since the rewrite nests the
user's own nodes unchanged, the result is the original source byte for byte;
every rewrite is checked that way, on the bytes, before anything is written.
"""

from __future__ import annotations

from typing import AbstractSet, List, Optional, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ._errors import RewriteError, SourceError
from ._markers import INSTRUMENTED_MARKER, MarkerMatcher, dotted
from ._node_types import STATEMENT_HOLDERS, with_held

#: The holders whose ``body`` is a list of statements, where the wrappings are.
_STATEMENT_LISTS = (cst.Module, cst.IndentedBlock)


class _MarkerStripper:
    """Unwraps marker wrappings in every statement list, bottom up.

    A walk of its own over statement holders only, rather than a libcst
    visitor: the visitor calls hooks on every field of every holder (a loop's
    target, a function's parameters), which costs more than the unwrapping.
    """

    def __init__(self, markers: MarkerMatcher, untouched: AbstractSet[int] = frozenset()) -> None:
        self._markers = markers
        self._untouched = untouched

    def strip(self, node: cst.CSTNode) -> cst.CSTNode:
        """``node`` (a statement holder) with the wrappings in it and below it unwrapped."""
        node = with_held(node, self._child)
        return self._unwrap_in(node) if type(node) in _STATEMENT_LISTS else node

    def _child(self, node, _listed: bool = False):
        # Markers live only in statement lists, and none in the subtrees the rewrite left untouched.
        return self.strip(node) if type(node) in STATEMENT_HOLDERS and id(node) not in self._untouched else node

    def _unwrap_in(self, node):
        # Every wrapping holds a try statement: most blocks are done with one cheap look.
        if not any(isinstance(statement, cst.Try) for statement in node.body):
            return node
        body, footer = self._unwrap(node.body)
        return node.with_changes(body=body, footer=[*footer, *node.footer])

    def _unwrap(self, statements: Sequence[cst.BaseStatement]):
        """Replace ``markers...; try: X finally: markers`` runs by X; returns (body, footer moved up)."""
        markers = self._markers
        result: List[cst.BaseStatement] = []
        footer: List[cst.EmptyLine] = []
        index = 0
        while index < len(statements):
            run_end = index
            while run_end < len(statements) and markers.is_marker(statements[run_end]):
                run_end += 1
            run = statements[index:run_end]
            if (run and run_end < len(statements) and any(markers.is_task_marker(s) for s in run)
                    and markers.is_wrapping_try(statements[run_end])):
                guarded = statements[run_end]
                inner = list(guarded.body.body)
                if len(inner) == 1 and markers.is_marker_with(inner[0]):
                    inner = list(inner[0].body.body)
                if inner:
                    inner[0] = inner[0].with_changes(leading_lines=[*run[0].leading_lines, *inner[0].leading_lines])
                result.extend(inner)
                if run_end == len(statements) - 1:
                    footer = list(guarded.body.footer)
                index = run_end + 1
                continue
            result.append(statements[index])
            index += 1
        return result, footer


def _without_header(body: Sequence[cst.BaseStatement], markers: MarkerMatcher) -> List[cst.BaseStatement]:
    """``body`` without the run of header statements that starts at the ittapi import.

    Only that run goes: a statement of the user's elsewhere that happens to
    look alike (``_autoitt_domain = 1``) stays.
    """
    start = next((i for i, s in enumerate(body) if markers.is_itt_import(s)), None)
    if start is None:
        return list(body)
    end = start + 1
    while end < len(body) and markers.is_header(body[end]):
        end += 1
    return [*body[:start], *body[end:]]


def strip_module(module: cst.Module, untouched: AbstractSet[int] = frozenset()) -> cst.Module:
    """``module`` without autoitt's header and markers.

    ``untouched``: ids of subtrees known to hold no markers (the rewrite's own
    list), which need not be visited.
    """
    markers = MarkerMatcher.for_copy(module)
    if markers is None:
        raise RewriteError("no 'import ittapi.compat as ...' header: not an autoitt copy")
    stripped = _MarkerStripper(markers, untouched).strip(module)
    return stripped.with_changes(body=_without_header(stripped.body, markers))


class _Leftovers(cst.CSTVisitor):
    """The first line that still calls the copy's ITT name or uses its domain variable."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, markers: MarkerMatcher) -> None:
        super().__init__()
        self._markers = markers
        self.line: Optional[int] = None

    def _found(self, node: cst.CSTNode) -> None:
        if self.line is None:
            self.line = self.get_metadata(PositionProvider, node).start.line

    def visit_Call(self, node: cst.Call) -> None:
        if (dotted(node.func) or "").startswith(self._markers.itt + "."):
            self._found(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self._markers.domain:
            self._found(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # `obj._autoitt_domain` names an attribute, not the variable
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # a keyword's name is not a use either
        return False


def strip_markers(data: bytes, name: str) -> bytes:
    """The original source of an autoitt copy: its markers and header removed.

    Raises :class:`SourceError` when ``data`` is not an autoitt copy, cannot be
    parsed, or still uses the copy's ITT names after stripping (its markers
    were edited by hand).
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
    leftovers = _Leftovers(MarkerMatcher.for_copy(module))
    MetadataWrapper(stripped, unsafe_skip_copy=True).visit(leftovers)
    if leftovers.line is not None:
        raise SourceError(name, "markers autoitt did not write this way remain after stripping "
                                "(was the copy edited by hand?)", leftovers.line)
    return stripped.bytes
