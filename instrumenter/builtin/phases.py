"""Where a step's time goes: the phase of each task, from its domain and name.

The streaming pass adds each task instance's time to its parent's row, by
the instance's category (:data:`CATEGORIES`); a step loop's phases are read
from its steps' rows and from the task that holds the steps (the step loop)
(:func:`~instrumenter.builtin.taskstats.step_phases`). The rules, for
PyTorch's tasks under ``emit_itt`` (first match):

* ``data``: ``enumerate(DataLoader)#...`` (the DataLoader's ``__next__``);
  also, per step, the time in the task holding the steps outside them (the
  loop itself: the next batch where the DataLoader is not a task, a
  ``tf.data`` iterator);
* ``optimizer``: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...``;
* ``backward``: the autograd engine's tasks (``autograd::engine::...``,
  ``...Backward0``, ``AccumulateGrad``);
* ``forward``: the other operators (``aten::``, ``autograd::``) called in the
  step;
* ``other_ops``: any other task in the step (oneDNN primitives called
  outside an operator, a framework's own ranges, the script's own markers);
* ``python``: the step's time in no task at all.

A step whose tasks are none of forward, backward or optimizer (no operator
tasks: ``--no-torch-ops``, TensorFlow, whose oneDNN tasks run on its own
threads) gets ``compute`` for all its tasks instead.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

#: The categories the pass counts children by; STEP marks a step in its holder's row.
CATEGORIES = ("other_ops", "forward", "backward", "optimizer", "data", "step", "own")
OTHER_OPS, FORWARD, BACKWARD, OPTIMIZER, DATA, STEP, OWN = range(len(CATEGORIES))

_BACKWARD = re.compile(r"^autograd::engine::|Backward\d*$|AccumulateGrad")


def category(domain: Optional[str], name: Optional[str], own_domains: Iterable[str],
             step_labels: Iterable[str]) -> int:
    """A task's category (:data:`CATEGORIES`) by the rules above."""
    name = name or ""
    if domain in own_domains:
        return STEP if name in step_labels else OWN
    if name.startswith("enumerate(DataLoader)"):
        return DATA
    if name.startswith("Optimizer."):
        return OPTIMIZER
    if _BACKWARD.search(name):
        return BACKWARD
    if name.startswith(("aten::", "autograd::")):
        return FORWARD
    return OTHER_OPS
