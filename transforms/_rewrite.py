"""Applying a :class:`~transforms._plan.Plan` to the script's libcst tree.

Only statements are visited: the transformer counts them in the same order as
detection did (see :mod:`transforms._index`) and never descends into
expressions, which keeps the rewrite close to the cost of a bare parse. Every
inserted statement is built from code text (the plan's), parsed in one go
with the module's own newline and indentation, so a CRLF file stays CRLF and
a two-space file stays two-space. The imports go where libcst's
``AddImportsVisitor`` would put them, found without the codemod framework
(importing it and ``libcst.matchers`` costs more than a whole small rewrite).

Every node the rewrite inserts is recorded with the region it marks, and the
copy's code is generated once, noting the line each inserted node lands on:
that is the exact :class:`~transforms._linemap.LineMap` of the copy.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst
from libcst._nodes.internal import CodegenState

from ._errors import RewriteError
from ._linemap import NEWLINE, LineMap, count_lines
from ._node_types import STATEMENT_HOLDERS, STATEMENTS
from ._plan import Edit, Plan, Wrap

_Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
#: An inserted node and the original line its first line is shown as (None: the line it precedes).
_Inserted = Tuple[cst.CSTNode, Optional[int]]

# Nodes whose children may hold statements (or are statement lines themselves); the rest are leaves here.
_DESCEND = STATEMENT_HOLDERS | {cst.SimpleStatementLine, cst.SimpleStatementSuite}


class _StatementRewriter(cst.CSTTransformer):
    """Wraps each planned statement and loop body, found by statement ordinal."""

    def __init__(self, plan: Plan, module: cst.Module, statements: Dict[str, cst.SimpleStatementLine]) -> None:
        super().__init__()
        self._edits: Dict[int, Edit] = {edit.ordinal: edit for edit in plan.edits}
        self._edit_ordinals = sorted(self._edits)
        self._spans = plan.spans
        #: ids of original subtrees left as they were (the safety check need not look inside)
        self.untouched: Set[int] = set()
        self._config = module.config_for_parsing
        self._default_indent = module.default_indent
        self._next_ordinal = 0
        self._ordinal_of: Dict[int, int] = {}
        self._indents: List[str] = []
        self._parsed = statements
        self._contexts: Dict[str, cst.BaseExpression] = {}
        self.applied = 0
        #: every node inserted (its first line is a line autoitt writes), with its region's line
        self.inserted: List[_Inserted] = []

    # -- traversal -------------------------------------------------------------

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind in STATEMENTS:
            ordinal = self._next_ordinal
            self._ordinal_of[id(node)] = ordinal
            self._next_ordinal += 1
            end = self._spans.get(ordinal)
            if end is not None and not self._edit_within(ordinal, end):
                # Nothing to change in this subtree: skip it whole, counting its statements.
                self._next_ordinal = end
                self.untouched.add(id(node))
                return False
        if kind is cst.IndentedBlock:
            self._indents.append(node.indent if node.indent is not None else self._default_indent)
        return kind in _DESCEND

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        kind = type(original_node)
        if kind is cst.IndentedBlock:
            self._indents.pop()
        if kind is cst.For or kind is cst.While:
            edit = self._edits.get(self._ordinal_of[id(original_node)])
            if edit is not None:
                self._check(edit, original_node)
                return self._wrap_loop(updated_node, edit)
        elif kind is cst.SimpleStatementLine:
            for small in original_node.body:
                edit = self._edits.get(self._ordinal_of[id(small)])
                if edit is not None:
                    self._check(edit, small)
                    return cst.FlattenSentinel(self._wrap_statements(updated_node, edit.around, edit.line))
        return updated_node

    def _edit_within(self, start: int, end: int) -> bool:
        at = bisect.bisect_left(self._edit_ordinals, start)
        return at < len(self._edit_ordinals) and self._edit_ordinals[at] < end

    def _check(self, edit: Edit, node: cst.CSTNode) -> None:
        expected = {"for": cst.For, "while": cst.While}.get(edit.kind, cst.BaseSmallStatement)
        if not isinstance(node, expected):
            raise RewriteError(
                f"statement {edit.ordinal} (line {edit.line}) is a {type(node).__name__}, expected {edit.kind}"
            )
        self.applied += 1

    # -- building blocks ------------------------------------------------------------

    @property
    def _unit(self) -> str:
        return self._indents[-1] if self._indents else self._default_indent

    def _statement(self, code: str) -> cst.SimpleStatementLine:
        # A node of its own for each place: the line map tells inserted lines apart by node.
        return self._parsed[code].with_changes()

    def _context(self, code: str) -> cst.BaseExpression:
        parsed = self._contexts.get(code)
        if parsed is None:
            parsed = self._contexts[code] = cst.parse_expression(code, config=self._config)
        return parsed

    def _block(self, body: Sequence[_Statement]) -> cst.IndentedBlock:
        return cst.IndentedBlock(body=list(body), indent=self._unit_or_none())

    def _unit_or_none(self) -> Optional[str]:
        unit = self._unit
        return None if unit == self._default_indent else unit

    def _wrap_statements(self, statement: _Statement, wrap: Wrap, line: int) -> List[_Statement]:
        """``before...; try: [with contexts:] statement  finally: after...``."""
        leading = statement.leading_lines
        inner: _Statement = statement.with_changes(leading_lines=())
        context = None
        if wrap.contexts:
            items = [cst.WithItem(self._context(code), comma=cst.MaybeSentinel.DEFAULT) for code in wrap.contexts]
            inner = context = cst.With(items=items, body=self._block([inner]))
        before = [self._statement(code) for code in wrap.before]
        after = [self._statement(code) for code in wrap.after]
        final = cst.Finally(body=self._block(after))
        guarded = cst.Try(body=self._block([inner]), finalbody=final)
        # The user's comments and blank lines above the statement stay above the markers.
        before[0] = before[0].with_changes(leading_lines=leading)
        self._record(line, *before, guarded, *([context] if context is not None else ()), final, *after)
        return [*before, guarded]

    def _wrap_loop(self, loop: Union[cst.For, cst.While], edit: Edit) -> cst.FlattenSentinel:
        if edit.each is not None:
            loop = loop.with_changes(body=self._wrap_body(loop.body, edit.each, edit.line))
        return cst.FlattenSentinel(self._wrap_statements(loop, edit.around, edit.line))

    def _wrap_body(self, body: cst.BaseSuite, wrap: Wrap, line: int) -> cst.IndentedBlock:
        if not isinstance(body, cst.IndentedBlock):
            # Detection leaves one-line bodies alone; reaching here is a bug.
            raise RewriteError("a loop body on its header's line cannot take markers")
        # The body keeps its own relative indent (None: the module's default, as written).
        unit = body.indent
        before = [self._statement(code) for code in wrap.before]
        after = [self._statement(code) for code in wrap.after]
        final = cst.Finally(body=cst.IndentedBlock(body=after, indent=unit))
        guarded = cst.Try(body=cst.IndentedBlock(body=list(body.body), indent=unit, footer=body.footer),
                          finalbody=final)
        self._record(line, *before, guarded, final, *after)
        return cst.IndentedBlock(body=[*before, guarded], header=body.header, indent=unit)

    def _record(self, line: int, *nodes: cst.CSTNode) -> None:
        self.inserted.extend((node, line) for node in nodes)


def _parse_statements(plan: Plan, config: cst.PartialParserConfig) -> Dict[str, cst.SimpleStatementLine]:
    """Every distinct line the plan inserts (markers, imports, header), parsed in one go: a parse per
    line costs far more. Each is used as a fresh node (``with_changes()``) wherever it goes."""
    codes = sorted({*(code for edit in plan.edits for wrap in (edit.around, edit.each) if wrap is not None
                      for code in (*wrap.before, *wrap.after)),
                    *(_import_code(*spec) for spec in plan.imports), *plan.header})
    newline = config.default_newline
    parsed = cst.parse_module(newline.join(codes) + newline, config=config)
    if len(parsed.body) != len(codes) or not all(isinstance(s, cst.SimpleStatementLine) for s in parsed.body):
        raise RewriteError("the lines to insert did not parse one statement each")
    return dict(zip(codes, parsed.body))


def _single(statement: cst.CSTNode, kinds) -> Optional[cst.BaseSmallStatement]:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            and isinstance(statement.body[0], kinds):
        return statement.body[0]
    return None


def _import_position(body: Sequence[cst.BaseStatement]) -> int:
    """Where libcst's ``AddImportsVisitor`` adds an import: after a leading docstring (or ``__strict__``
    flag) and the run of import statements that follows it; at the top when there is none."""
    first = body[0] if body else None
    docstring = _single(first, cst.Expr)
    flag = _single(first, cst.Assign)
    skip = (docstring is not None and isinstance(docstring.value, cst.SimpleString)) or (
        flag is not None and len(flag.targets) == 1 and isinstance(flag.targets[0].target, cst.Name)
        and flag.targets[0].target.value == "__strict__")
    at = 1 if skip else 0
    while at < len(body) and _single(body[at], (cst.Import, cst.ImportFrom)) is not None:
        at += 1
    return at


def _import_code(module_name: str, obj: Optional[str], asname: Optional[str]) -> str:
    alias = f" as {asname}" if asname else ""
    return f"from {module_name} import {obj}{alias}" if obj else f"import {module_name}{alias}"


def _add_header(module: cst.Module, plan: Plan,
                statements: Dict[str, cst.SimpleStatementLine]) -> Tuple[cst.Module, List[cst.CSTNode]]:
    """The imports, then the module-level ITT objects, where ``AddImportsVisitor`` would add the imports.

    Nothing else of the module changes: AddImportsVisitor would also re-space
    the statement after the imports, and autoitt never touches a line of the
    user's outside the markers (``strip`` relies on it). Returns the module and
    the statements inserted.
    """
    imports = [statements[_import_code(*spec)].with_changes() for spec in plan.imports]
    header = [statements[code].with_changes() for code in plan.header]
    comment = cst.EmptyLine(comment=cst.Comment(plan.header_comment))
    header[0] = header[0].with_changes(leading_lines=[cst.EmptyLine(), comment])
    inserted = [*imports, *header]
    at = _import_position(module.body)
    return module.with_changes(body=[*module.body[:at], *inserted, *module.body[at:]]), inserted


@dataclass
class _LineNotingState(CodegenState):
    """libcst's code generation, noting the line on which each watched node starts.

    libcst's ``PositionProvider`` records every node's position as it generates
    code, which costs about five code generations; the line map needs only the
    first lines of the nodes autoitt inserted, so this hooks the same
    ``before_codegen`` callback and counts newlines only when such a node starts.
    """

    watched: FrozenSet[int] = frozenset()
    starts: Dict[int, int] = field(default_factory=dict)
    _line: int = 1
    _counted: int = 0

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.watched:
            tokens = self.tokens
            self._line += len(NEWLINE.findall("".join(tokens[self._counted:])))
            self._counted = len(tokens)
            self.starts[id(node)] = self._line


def _generate(module: cst.Module, inserted: Sequence[_Inserted],
              header: Sequence[cst.CSTNode]) -> Tuple[str, Dict[int, Optional[int]]]:
    """The copy's code, and its inserted lines (copy line -> original line shown), from one code generation.

    Each inserted node contributes its own first line, after its leading
    lines: a marker's are the user's comments and blank lines moved above it,
    a header statement's (the blank line and comment above the first) are
    autoitt's own.
    """
    entries = [*inserted, *((node, None) for node in header)]
    state = _LineNotingState(default_indent=module.default_indent, default_newline=module.default_newline,
                             watched=frozenset(id(node) for node, _ in entries))
    module._codegen(state)
    lines: Dict[int, Optional[int]] = {}
    for node, shown in entries:
        start = state.starts[id(node)]
        leading = len(getattr(node, "leading_lines", ()))
        if shown is None:
            lines.update((start + k, shown) for k in range(leading))
        lines[start + leading] = shown
    return "".join(state.tokens), lines


@dataclass(frozen=True)
class Rewritten:
    """The parsed original, the instrumented tree and its bytes, the original subtrees it shares
    unchanged, and the lines the rewrite inserted."""

    original: cst.Module
    instrumented: cst.Module
    untouched: FrozenSet[int]
    output: bytes
    #: copy line -> original line it is shown as (None: the line it precedes), for every inserted line
    inserted_lines: Dict[int, Optional[int]]
    copy_lines: int
    original_lines: int

    def line_map(self) -> LineMap:
        """The copy's exact line map; :class:`RewriteError` if the copy is not the original plus those lines."""
        try:
            return LineMap.from_inserted(self.copy_lines, self.original_lines, self.inserted_lines)
        except ValueError as exc:
            raise RewriteError(f"line map: {exc}") from None


def rewrite_module(data: bytes, plan: Plan) -> Rewritten:
    """Parse ``data`` and apply ``plan``; ``output`` keeps the encoding and newlines."""
    module = cst.parse_module(data)
    statements = _parse_statements(plan, module.config_for_parsing)
    rewriter = _StatementRewriter(plan, module, statements)
    updated = module.visit(rewriter)
    if rewriter.applied != len(plan.edits):
        raise RewriteError(f"applied {rewriter.applied} of {len(plan.edits)} planned edits")
    instrumented, header = _add_header(updated, plan, statements)
    code, inserted_lines = _generate(instrumented, rewriter.inserted, header)
    return Rewritten(module, instrumented, frozenset(rewriter.untouched), code.encode(module.encoding),
                     inserted_lines, count_lines(code), count_lines(data.decode(module.encoding)))
