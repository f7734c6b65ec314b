"""Applying a :class:`~transforms._plan.Plan` to the script's libcst tree.

Only statements are walked: the rewriter counts them in the same order as
detection did (see :mod:`transforms._index`) and never descends into
expressions, which keeps the rewrite close to the cost of a bare parse. Every
inserted statement is built from code text (the plan's), parsed in one go
with the module's own newline and indentation, so a CRLF file stays CRLF and
a two-space file stays two-space. The imports go where libcst's
``AddImportsVisitor`` would put them, found without the codemod framework
(importing it and ``libcst.matchers`` costs more than a whole small rewrite).

Every node the rewrite inserts is recorded with the region it marks, and the
copy's code is generated once (:mod:`transforms._codegen`), noting the line
each inserted node lands on: that is the exact
:class:`~transforms._linemap.LineMap` of the copy.
"""

from __future__ import annotations

import bisect
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from ._codegen import Inserted, Shared, generate_copy
from ._errors import RewriteError
from ._linemap import LineMap, count_lines
from ._node_types import HOLDING_FIELDS, STATEMENT_HOLDERS, STATEMENTS
from ._plan import Edit, Plan, Wrap

_Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
class _StatementRewriter:
    """Wraps each planned statement and loop body, found by statement ordinal.

    A walk of its own over statement holders rather than a libcst visitor,
    which would call hooks on every field of every statement it passes (a
    loop's target, a function's parameters) only to be told to skip it.
    Statements are counted in the order detection counted them, libcst's
    visiting order (see ``HOLDING_FIELDS``).
    """

    def __init__(self, plan: Plan, module: cst.Module, statements: Dict[str, cst.SimpleStatementLine]) -> None:
        self._edits: Dict[int, Edit] = {edit.ordinal: edit for edit in plan.edits}
        self._edit_ordinals = sorted(self._edits)
        self._spans = plan.spans
        #: ids of original subtrees left as they were (the safety check need not look inside)
        self.untouched: Set[int] = set()
        self._default_indent = module.default_indent
        self._next_ordinal = 0
        self._indents: List[str] = []
        self._parsed = statements
        self.applied = 0
        #: every node inserted (its first line is a line autoitt writes), with its region's line
        self.inserted: List[Inserted] = []

    # -- traversal -------------------------------------------------------------

    def rewrite(self, module: cst.Module) -> cst.Module:
        """``module`` with the plan's edits applied."""
        return self._holder(module)

    def _holder(self, node: cst.CSTNode) -> cst.CSTNode:
        """``node`` (a statement holder) with the statements it holds rewritten."""
        changes = {}
        for name in HOLDING_FIELDS:
            value = getattr(node, name, None)
            if value is None:
                continue
            kind = type(value)
            if kind is tuple or kind is list:
                if name == "body":  # a statement list (a module's or an indented block's)
                    new = []
                    for statement in value:
                        rewritten = self._rewrite_statement(statement)
                        if type(rewritten) is list:
                            new.extend(rewritten)
                        else:
                            new.append(rewritten)
                else:  # except handlers, match cases
                    new = [self._holder(item) for item in value]
                if all(a is b for a, b in zip(new, value)) and len(new) == len(value):
                    continue
            elif kind is cst.IndentedBlock:
                self._indents.append(value.indent if value.indent is not None else self._default_indent)
                new = self._holder(value)
                self._indents.pop()
            elif kind in STATEMENTS:  # an elif
                new = self._rewrite_statement(value)
            elif kind is cst.SimpleStatementSuite:  # a body on its header's line: counted, never marked
                self._next_ordinal += len(value.body)
                continue
            elif kind in STATEMENT_HOLDERS:  # else, finally, one except handler
                new = self._holder(value)
            else:
                continue
            if new is not value:
                changes[name] = new
        return node.with_changes(**changes) if changes else node

    def _rewrite_statement(self, node: cst.CSTNode) -> Union[cst.CSTNode, List[_Statement]]:
        """A statement of a statement list, rewritten: itself, or the statements that replace it."""
        kind = type(node)
        start = self._next_ordinal
        if kind is cst.SimpleStatementLine:
            end = self._next_ordinal = start + len(node.body)
            if not self._edit_within(start, end):
                self.untouched.add(id(node))
                return node
            for ordinal, small in enumerate(node.body, start):
                edit = self._edits.get(ordinal)
                if edit is not None:
                    self._check(edit, small)
                    return self._wrap_statements(node, edit.around, edit.line)
            return node
        self._next_ordinal += 1
        end = self._spans.get(start)
        if end is not None and not self._edit_within(start, end):
            # Nothing to change in this subtree: skip it whole, counting its statements.
            self._next_ordinal = end
            self.untouched.add(id(node))
            return node
        updated = self._holder(node)
        if kind is cst.For or kind is cst.While:
            edit = self._edits.get(start)
            if edit is not None:
                self._check(edit, node)
                return self._wrap_loop(updated, edit)
        return updated

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
        # Parsed with the statements, as an expression statement: the same expression node.
        return self._parsed[code].body[0].value

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

    def _wrap_loop(self, loop: Union[cst.For, cst.While], edit: Edit) -> List[_Statement]:
        if edit.each is not None:
            loop = loop.with_changes(body=self._wrap_body(loop.body, edit.each, edit.line))
        return self._wrap_statements(loop, edit.around, edit.line)

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
    """Every distinct line the plan inserts (markers, imports, header) and every context it enters, parsed
    in one go: a parse per line costs far more. Each line is used as a fresh node (``with_changes()``)
    wherever it goes; a context is the expression of its line."""
    codes = sorted({*(code for edit in plan.edits for wrap in (edit.around, edit.each) if wrap is not None
                      for code in (*wrap.before, *wrap.after, *wrap.contexts)),
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


class Rewritten:
    """The parsed original, the instrumented tree and its bytes, the original subtrees it shares
    unchanged (with their code), and the lines the rewrite inserted.

    ``inserted_lines``: copy line -> original line it is shown as (None: the
    line it precedes), for every inserted line. A plain class: only the rewrite
    makes one, and making a dataclass costs about a millisecond at import.
    """

    __slots__ = ("original", "instrumented", "untouched", "shared", "output", "inserted_lines", "copy_lines",
                 "original_lines")

    def __init__(self, original: cst.Module, instrumented: cst.Module, untouched: FrozenSet[int],
                 shared: Dict[int, Shared], output: bytes, inserted_lines: Dict[int, Optional[int]],
                 copy_lines: int, original_lines: int) -> None:
        self.original = original
        self.instrumented = instrumented
        self.untouched = untouched
        #: the code of the untouched statements, as the copy generated it (for the safety check)
        self.shared = shared
        self.output = output
        self.inserted_lines = inserted_lines
        self.copy_lines = copy_lines
        self.original_lines = original_lines

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
    updated = rewriter.rewrite(module)
    if rewriter.applied != len(plan.edits):
        raise RewriteError(f"applied {rewriter.applied} of {len(plan.edits)} planned edits")
    instrumented, header = _add_header(updated, plan, statements)
    untouched = frozenset(rewriter.untouched)
    code, inserted_lines, shared = generate_copy(instrumented, rewriter.inserted, header, untouched)
    return Rewritten(module, instrumented, untouched, shared, code.encode(module.encoding),
                     inserted_lines, count_lines(code), count_lines(data.decode(module.encoding)))
