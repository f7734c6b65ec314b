"""Statement order, shared by the ``ast`` side (detection) and the libcst side (rewrite).

Both trees hold the same statements in the same source order, so the n-th
statement of a pre-order walk names the same code in each. Detection records
these ordinals; the rewriter counts statements the same way and applies each
planned change at its ordinal, checking that the statement kind agrees.
"""

from __future__ import annotations

import ast
from typing import Iterator, List, Sequence

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


def iter_expression_nodes(stmts: Sequence[ast.stmt], *, enter_loops: bool) -> Iterator[ast.AST]:
    """Every node executed as part of ``stmts`` themselves.

    Nested function and class bodies and lambdas are skipped (defining them
    runs nothing); nested loops are skipped unless ``enter_loops``.
    """
    stack: List[ast.AST] = list(reversed(stmts))
    while stack:
        node = stack.pop()
        if isinstance(node, DEFINITIONS):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                # Decorators and defaults do run at definition time.
                stack.extend(reversed(node.decorator_list))
            continue
        if not enter_loops and isinstance(node, LOOPS):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def iter_calls(stmts: Sequence[ast.stmt], *, enter_loops: bool) -> Iterator[ast.Call]:
    for node in iter_expression_nodes(stmts, enter_loops=enter_loops):
        if isinstance(node, ast.Call):
            yield node
