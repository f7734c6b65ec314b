"""Code generation of an instrumented copy, and of its stripped tree from the copy's code.

libcst generates a tree's code in one walk over every node. The copy's walk
also notes the line each inserted node starts on (for the line map) and
keeps the code of each statement the rewrite left untouched, so that the
safety check can generate the stripped copy, which holds the same
statements, without generating them a second time.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

from ._linemap import NEWLINE
from ._node_types import STATEMENT_HOLDERS, with_held

#: An inserted node and the original line its first line is shown as (None: the line it precedes).
Inserted = Tuple[cst.CSTNode, Optional[int]]
#: The code an untouched statement generated in the copy, ready to stand in for it in another tree:
#: (the node, its text cut at every indentation it wrote, without the levels around it; its last token).
Shared = Tuple[cst.CSTNode, Tuple[str, ...], str]


class _CopyCodegenState(CodegenState):
    """libcst's code generation of the copy, noting the line on which each inserted node starts and
    keeping the code of each untouched statement.

    libcst's ``PositionProvider`` records every node's position as it generates
    code, which costs about five code generations; the line map needs only the
    first lines of the nodes autoitt inserted, so this hooks the same
    ``before_codegen`` callback and counts newlines only when such a node starts.

    The safety check generates the stripped copy, which holds the same
    untouched statements, most at another indentation. A node's code depends on
    nothing but the node, the module's defaults and the indentation levels
    around it (which its lines begin with), so the code kept here, with those
    levels cut out, is what the node generates anywhere: :func:`generate_reusing`
    puts it back under the levels of its new place instead of generating the
    subtree again.
    """

    def __init__(self, module: cst.Module, watched: FrozenSet[int], untouched: FrozenSet[int]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        # One look-up per node: this runs for every node of the copy. True: watched; False: untouched.
        self._roles: Dict[int, bool] = dict.fromkeys(untouched, False)
        self._roles.update(dict.fromkeys(watched, True))
        #: id of a watched node -> the copy line it starts on
        self.starts: Dict[int, int] = {}
        #: id of an untouched node -> its code (None: not to be reused)
        self.shared: Dict[int, Optional[Shared]] = {}
        self._line = 1
        self._counted = 0
        self._kept: Optional[cst.CSTNode] = None  # the untouched node being generated
        self._kept_from = 0
        self._kept_levels = 0
        self._indents: List[int] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        watched = self._roles.get(id(node))
        if watched is None:
            return
        if watched:
            tokens = self.tokens
            text = "".join(tokens[self._counted:])
            # str.count is many times quicker than the regular expression, which only a CR needs.
            self._line += len(NEWLINE.findall(text)) if "\r" in text else text.count("\n")
            self._counted = len(tokens)
            self.starts[id(node)] = self._line
        elif self._kept is None:
            self._kept, self._kept_from, self._kept_levels = node, len(self.tokens), len(self.indent_tokens)
            self._indents.clear()

    def add_indent_tokens(self) -> None:
        if self._kept is not None:
            self._indents.append(len(self.tokens))
        self.tokens.extend(self.indent_tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if node is not self._kept:
            return
        self._kept = None
        tokens, levels = self.tokens, self._kept_levels
        pieces, at = [], self._kept_from
        for indent in self._indents:
            pieces.append("".join(tokens[at:indent]))
            at = indent + levels
        key = id(node)
        if at >= len(tokens) or key in self.shared:
            # No last token of its own (or the node is in the tree twice): it is generated again.
            self.shared[key] = None
            return
        pieces.append("".join(tokens[at:-1]))
        self.shared[key] = (node, tuple(pieces), tokens[-1])


def generate_copy(module: cst.Module, inserted: Sequence[Inserted], header: Sequence[cst.CSTNode],
                  untouched: FrozenSet[int] = frozenset()) -> Tuple[str, Dict[int, Optional[int]], Dict[int, Shared]]:
    """The copy's code, its inserted lines (copy line -> original line shown) and the code of the
    ``untouched`` statements, from one code generation.

    Each inserted node contributes its own first line, after its leading
    lines: a marker's are the user's comments and blank lines moved above it,
    a header statement's (the blank line and comment above the first) are
    autoitt's own.
    """
    entries = [*inserted, *((node, None) for node in header)]
    state = _CopyCodegenState(module, frozenset(id(node) for node, _ in entries), untouched)
    module._codegen(state)
    lines: Dict[int, Optional[int]] = {}
    for node, shown in entries:
        start = state.starts[id(node)]
        leading = len(getattr(node, "leading_lines", ()))
        if shown is None:
            lines.update((start + k, shown) for k in range(leading))
        lines[start + leading] = shown
    shared = {key: kept for key, kept in state.shared.items() if kept is not None}
    return "".join(state.tokens), lines, shared


class _Generated:
    """Stands in for an untouched statement in a statement list: its code kept from the copy."""

    __slots__ = ("_pieces", "_last")

    def __init__(self, pieces: Tuple[str, ...], last: str) -> None:
        self._pieces = pieces
        self._last = last

    def _codegen(self, state: CodegenState) -> None:
        # Two tokens, as the node ends with its own newline token: Module pops that one when the
        # file has no final newline.
        state.tokens.append("".join(state.indent_tokens).join(self._pieces))
        state.tokens.append(self._last)


def _standing_in(node: cst.CSTNode, shared: Dict[int, Shared]) -> cst.CSTNode:
    """``node`` with each statement of ``shared`` in its statement lists replaced by its kept code.

    Only statement lists (the ``body`` of a module or an indented block) are
    looked into: their statements are generated with no argument from their
    parent (an ``elif`` is not, and stays a node).
    """
    def replace(item: cst.CSTNode, listed: bool) -> cst.CSTNode:
        kept = shared.get(id(item)) if listed else None
        if kept is not None and kept[0] is item:
            return _Generated(kept[1], kept[2])
        return _standing_in(item, shared) if type(item) in STATEMENT_HOLDERS else item

    return with_held(node, replace)


def generate_reusing(module: cst.Module, copy: cst.Module, shared: Dict[int, Shared]) -> bytes:
    """``module.bytes``, generating each statement it shares with ``copy`` from the copy's code (``shared``).

    The same bytes as ``module.bytes`` (see :class:`_CopyCodegenState`), at the
    cost of generating only what is not shared: for a stripped copy, the
    statements autoitt wrapped and the blocks around them.
    """
    if (module.default_indent, module.default_newline) != (copy.default_indent, copy.default_newline):
        return module.bytes  # the kept code was generated with the copy's defaults
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    _standing_in(module, shared)._codegen(state)
    return "".join(state.tokens).encode(module.encoding)
