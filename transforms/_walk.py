"""Statement order, shared by the ``ast`` side (detection) and the libcst side (rewrite).

Both trees hold the same statements in the same source order, so the n-th
statement of a pre-order walk names the same code in each. Detection records
these ordinals; the rewriter counts statements the same way and applies each
planned change at its ordinal, checking that the statement kind agrees.
"""

from __future__ import annotations

import ast
from typing import List, Sequence

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
