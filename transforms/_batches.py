"""Where a step makes its own batch: the statement is a region of role ``batch``, so its time is ``data``.

A loop that iterates a DataLoader has its batch fetched between steps (``enumerate(DataLoader)``, the
loop's own time: ``data`` in the phases). A loop that makes its batch inside the step, as nanoGPT's
``X, Y = get_batch("train")`` and the word language model's ``data, targets = get_batch(source, i)`` do,
would have the operators that slice, stack and copy it counted as ``forward``. The rule, lexical and
checked on both: inside a step loop (not in a function it calls, nor in a loop nested in another region),
an assignment of a call whose function is named for a batch (``get_batch``, ``next_batch``,
``sample_batch``) or of ``next(...)``, whose target feeds the model's forward pass in that loop.
``size = get_batch_size()`` is not named for a batch, and ``seen = get_batch()`` feeds no model call: both
are left alone.
"""

from __future__ import annotations

import ast
import re
from typing import List, Sequence, Set, Tuple

from . import _eval_evidence as eev
from ._index import Index, Site
from ._names import dotted, last_name

#: The role of a batch-making statement's region; the phases count its task as ``data``.
BATCH_ROLE = "batch"
#: A function named for making or fetching a batch.
_BATCH_FUNCTION = re.compile(r"(?:^|_)(?:get|next|make|sample|fetch|load|read)_?batch(?:es)?$", re.I)


def batch_fetches(index: Index, found: Sequence[Tuple[Site, str, str]]) -> List[Tuple[Site, str, str]]:
    """(site, ``batch``, reason) for each statement that makes a step loop's batch inside the step."""
    steps = {id(site.node): site.node for site, role, _ in found if role == "step" and site.call is None}
    regions = {id(site.node) for site, _, _ in found}
    if not steps:
        return []
    fed = {key: _fed_to_the_model(loop, index.models) for key, loop in steps.items()}
    added: List[Tuple[Site, str, str]] = []
    for stmt, ordinal, function, loops, one_line in index.simple:
        inner = next((loop for loop in reversed(loops) if id(loop) in regions), None)
        if inner is None or id(inner) not in steps or one_line or not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        call = stmt.value
        if not isinstance(call, ast.Call) or not _makes_a_batch(call):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}
        feeding = sorted(names & fed[id(inner)])
        if not feeding:
            continue
        called = dotted(call.func) or "next"
        added.append((Site(stmt, ordinal, function, loops, None, call, BATCH_ROLE), BATCH_ROLE,
                      f"makes the step's batch: {called}() gives {', '.join(feeding)}, fed to the model"))
    return added


def _makes_a_batch(call: ast.Call) -> bool:
    if isinstance(call.func, ast.Name) and call.func.id == "next":
        return True
    name = last_name(call.func) or ""
    return bool(_BATCH_FUNCTION.search(name))


def _fed_to_the_model(loop: ast.AST, models: Set[str]) -> Set[str]:
    """The names a forward pass in ``loop`` is given (``model(X, Y)``, ``model(data.to(device))``)."""
    names: Set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.Call) and eev.forward_pass(node, models) is not None:
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                names.update(n.id for n in ast.walk(argument) if isinstance(n, ast.Name))
    return names
