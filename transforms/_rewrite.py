"""Applying a :class:`~transforms._plan.Plan` to the script's libcst tree.

Only statements are visited: the transformer counts them in the same order as
detection did (see :mod:`transforms._walk`) and never descends into
expressions, which keeps the rewrite close to the cost of a bare parse. The
import goes in through libcst's ``AddImportsVisitor``; everything else is
built from code text parsed with the module's own newline and indentation, so
a CRLF file stays CRLF and a two-space file stays two-space.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Union

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from ._errors import RewriteError
from ._plan import Edit, Plan, Wrap

_Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]

# Nodes whose children may hold statements; everything else is a leaf here.
_DESCEND = (
    cst.Module,
    cst.BaseCompoundStatement,
    cst.IndentedBlock,
    cst.SimpleStatementLine,
    cst.SimpleStatementSuite,
    cst.Else,
    cst.Finally,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.MatchCase,
)


class _StatementRewriter(cst.CSTTransformer):
    """Wraps each planned statement and loop body, found by statement ordinal."""

    def __init__(self, plan: Plan, module: cst.Module) -> None:
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
        self._parsed = self._parse_markers(plan)
        self._contexts: Dict[str, cst.BaseExpression] = {}
        self.applied = 0

    def _parse_markers(self, plan: Plan) -> Dict[str, cst.SimpleStatementLine]:
        """Every distinct marker line, parsed in one go (one parse per line costs far more)."""
        codes = sorted({code for edit in plan.edits
                        for wrap in (edit.around, edit.each) if wrap is not None
                        for code in (*wrap.before, *wrap.after)})
        if not codes:
            return {}
        newline = self._config.default_newline
        parsed = cst.parse_module(newline.join(codes) + newline, config=self._config)
        if len(parsed.body) != len(codes):
            raise RewriteError("marker lines did not parse one statement each")
        return dict(zip(codes, parsed.body))

    # -- traversal -------------------------------------------------------------

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            ordinal = self._next_ordinal
            self._ordinal_of[id(node)] = ordinal
            self._next_ordinal += 1
            end = self._spans.get(ordinal)
            if end is not None and not self._edit_within(ordinal, end):
                # Nothing to change in this subtree: skip it whole, counting its statements.
                self._next_ordinal = end
                self.untouched.add(id(node))
                return False
        if isinstance(node, cst.IndentedBlock):
            self._indents.append(node.indent if node.indent is not None else self._default_indent)
        return isinstance(node, _DESCEND)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        if isinstance(original_node, cst.IndentedBlock):
            self._indents.pop()
        if isinstance(original_node, (cst.For, cst.While)):
            edit = self._edits.get(self._ordinal_of[id(original_node)])
            if edit is not None:
                self._check(edit, original_node)
                return self._wrap_loop(updated_node, edit)
        elif isinstance(original_node, cst.SimpleStatementLine):
            for small in original_node.body:
                edit = self._edits.get(self._ordinal_of[id(small)])
                if edit is not None:
                    self._check(edit, small)
                    return self._wrap_statement(updated_node, edit.around)
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
        return self._parsed[code]

    def _context(self, code: str) -> cst.BaseExpression:
        parsed = self._contexts.get(code)
        if parsed is None:
            parsed = self._contexts[code] = cst.parse_expression(code, config=self._config)
        return parsed

    def _block(self, body: Sequence[_Statement], indent: Optional[str] = None) -> cst.IndentedBlock:
        return cst.IndentedBlock(body=list(body), indent=indent if indent is not None else self._unit_or_none())

    def _unit_or_none(self) -> Optional[str]:
        unit = self._unit
        return None if unit == self._default_indent else unit

    def _wrap_statements(self, statement: _Statement, wrap: Wrap, indent: Optional[str] = None) -> List[_Statement]:
        """``before...; try: [with context:] statement  finally: after...``."""
        leading = statement.leading_lines
        inner: _Statement = statement.with_changes(leading_lines=())
        if wrap.context is not None:
            inner = cst.With(
                items=[cst.WithItem(self._context(wrap.context))],
                body=self._block([inner], indent=indent),
            )
        before = [self._statement(code) for code in wrap.before]
        guarded = cst.Try(
            body=self._block([inner], indent=indent),
            finalbody=cst.Finally(body=self._block([self._statement(code) for code in wrap.after], indent=indent)),
        )
        result: List[_Statement] = [*before, guarded]
        result[0] = result[0].with_changes(leading_lines=leading)
        return result

    def _wrap_statement(self, statement: _Statement, wrap: Wrap) -> cst.FlattenSentinel:
        return cst.FlattenSentinel(self._wrap_statements(statement, wrap))

    def _wrap_loop(self, loop: Union[cst.For, cst.While], edit: Edit) -> cst.FlattenSentinel:
        if edit.each is not None:
            loop = loop.with_changes(body=self._wrap_body(loop.body, edit.each))
        return self._wrap_statement(loop, edit.around)

    def _wrap_body(self, body: cst.BaseSuite, wrap: Wrap) -> cst.IndentedBlock:
        if not isinstance(body, cst.IndentedBlock):
            # Detection leaves one-line bodies alone; reaching here is a bug.
            raise RewriteError("a loop body on its header's line cannot take markers")
        # The body keeps its own relative indent (None: the module's default, as written).
        unit = body.indent
        before = [self._statement(code) for code in wrap.before]
        guarded = cst.Try(
            body=cst.IndentedBlock(body=list(body.body), indent=unit, footer=body.footer),
            finalbody=cst.Finally(
                body=cst.IndentedBlock(body=[self._statement(code) for code in wrap.after], indent=unit)
            ),
        )
        return cst.IndentedBlock(body=[*before, guarded], header=body.header, indent=unit)


def _leading_block_end(module: cst.Module) -> int:
    """Index just past the docstring and first import block (AddImportsVisitor's territory)."""
    body = module.body
    index = 0
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) and isinstance(
        body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)
    ):
        index = 1
    while index < len(body) and isinstance(body[index], cst.SimpleStatementLine) and isinstance(
        body[index].body[0], (cst.Import, cst.ImportFrom)
    ):
        index += 1
    return index


def _import_code(module_name: str, obj: Optional[str], asname: Optional[str]) -> str:
    alias = f" as {asname}" if asname else ""
    return f"from {module_name} import {obj}{alias}" if obj else f"import {module_name}{alias}"


def _add_header(module: cst.Module, plan: Plan) -> cst.Module:
    """The imports (through AddImportsVisitor) and the module-level ITT objects after them.

    AddImportsVisitor decides where imports go and writes them. It only looks
    at the leading docstring and import block, so it runs on that part alone
    (no scope resolution over the whole file). Its output is used only for the
    statements it adds; they are spliced into the original body, because the
    visitor also re-spaces the statement after the imports, and autoitt never
    touches a line of the user's outside the markers (``strip`` relies on it).
    """
    split = _leading_block_end(module)
    # Only the docstring and leading imports: what follows can be a class of
    # thousands of lines that the visitor would otherwise walk with metadata.
    head = module.with_changes(body=module.body[:split])
    context = CodemodContext()
    for module_name, obj, asname in plan.imports:
        AddImportsVisitor.add_needed_import(context, module_name, obj, asname)
    head = AddImportsVisitor(context).transform_module(head)
    wanted = {_import_code(*spec) for spec in plan.imports}
    empty = cst.Module([])
    added = [
        (i, statement) for i, statement in enumerate(head.body)
        if empty.code_for_node(statement.with_changes(leading_lines=())).strip() in wanted
    ]
    if len(added) != len(wanted):
        raise RewriteError("AddImportsVisitor did not add the imports autoitt needs")
    at = added[0][0]
    config = module.config_for_parsing
    header = [cst.parse_statement(code + config.default_newline, config=config) for code in plan.header]
    comment = cst.EmptyLine(comment=cst.Comment(plan.header_comment))
    header[0] = header[0].with_changes(leading_lines=[cst.EmptyLine(), comment])
    imports = [statement.with_changes(leading_lines=()) for _, statement in added]
    return module.with_changes(body=[*module.body[:at], *imports, *header, *module.body[at:]])


@dataclass(frozen=True)
class Rewritten:
    """The parsed original, the instrumented tree, and the original subtrees it shares unchanged."""

    original: cst.Module
    instrumented: cst.Module
    untouched: FrozenSet[int]


def rewrite_module(data: bytes, plan: Plan) -> Rewritten:
    """Parse ``data`` and apply ``plan``; ``instrumented.bytes`` keeps the encoding and newlines."""
    module = cst.parse_module(data)
    rewriter = _StatementRewriter(plan, module)
    updated = module.visit(rewriter)
    if rewriter.applied != len(plan.edits):
        raise RewriteError(f"applied {rewriter.applied} of {len(plan.edits)} planned edits")
    return Rewritten(module, _add_header(updated, plan), frozenset(rewriter.untouched))


def rewrite(data: bytes, plan: Plan) -> bytes:
    """The instrumented bytes of ``data`` (same encoding and newlines)."""
    return rewrite_module(data, plan).instrumented.bytes
