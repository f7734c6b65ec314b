"""The libcst node types the statement-only walks (rewrite, strip) tell apart, as sets of concrete classes.

libcst's base node classes are abstract (``abc``): ``isinstance`` against one
goes through ABC subclass checks, which cost several milliseconds in a fresh
process before their caches fill, a sizeable part of instrumenting a small
script. A ``type(node) in SET`` lookup costs nothing of the kind.
"""

from __future__ import annotations

from typing import Callable, FrozenSet

import libcst as cst


def concrete(*bases: type) -> FrozenSet[type]:
    """Every concrete (instantiable) subclass of ``bases``, themselves included."""
    found = set()
    pending = list(bases)
    while pending:
        cls = pending.pop()
        if cls in found:
            continue
        found.add(cls)
        pending.extend(cls.__subclasses__())
    return frozenset(cls for cls in found if not getattr(cls, "__abstractmethods__", None))


#: A statement of the pre-order walk shared with detection (see ``transforms._index``).
STATEMENTS = concrete(cst.BaseSmallStatement, cst.BaseCompoundStatement)
#: Nodes whose children may hold statements; everything else is a leaf to these walks.
STATEMENT_HOLDERS = concrete(cst.Module, cst.BaseCompoundStatement, cst.IndentedBlock, cst.Else, cst.Finally,
                             cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase)
#: The fields through which a holder holds statements (a suite or a statement list, except handlers, else,
#: finally, match cases), in the order libcst visits them, which is the order of the statements.
HOLDING_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")


def with_held(node: cst.CSTNode, replace: Callable[[cst.CSTNode, bool], cst.CSTNode]) -> cst.CSTNode:
    """``node`` (a statement holder) with what it holds replaced, one level down: a holder in one of its
    :data:`HOLDING_FIELDS` by ``replace(holder, False)``, each item of a list there by ``replace(item,
    listed)`` (``listed``: the list is a statement list, ``body``); ``node`` itself when nothing changed."""
    changes = {}
    for name in HOLDING_FIELDS:
        value = getattr(node, name, None)
        if type(value) in STATEMENT_HOLDERS:
            new = replace(value, False)
            if new is not value:
                changes[name] = new
        elif isinstance(value, (list, tuple)):
            listed = name == "body"
            new = [replace(item, listed) for item in value]
            if not all(a is b for a, b in zip(new, value)):
                changes[name] = new
    return node.with_changes(**changes) if changes else node
