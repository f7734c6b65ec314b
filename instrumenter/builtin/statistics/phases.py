"""Where a step's time goes: the phase of each task, from its domain and name.

A step loop's phases are measured (:func:`measure`) over its steady steps
from the task instances the streaming pass keeps: the tasks a step runs, by
category (:data:`CATEGORIES`), and the time in the loop before each step. The
rules, for PyTorch's tasks under ``emit_itt`` (first match):

* ``data``: ``enumerate(DataLoader)#...`` (the DataLoader's ``__next__``), and
  the step's own statement that makes its batch (a ``batch`` region: nanoGPT's
  ``get_batch``, what it runs included);
  also, per step, the time since the previous step ended (or the loop
  began), less the own regions run there (an evaluation between steps): the
  next batch where the DataLoader is not a task, a ``tf.data`` iterator;
* ``communication``: collectives (``c10d::...``, ``gloo:...``, ``nccl:...``,
  ``mpi:...``, ``ucc:...``) the step calls; and the step's time outside
  every task while a collective ran on another thread of its process: the
  wait for DDP's allreduce at the end of ``backward()``, which gloo runs on
  its own threads;
* ``optimizer``: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...``, less
  the closures they run (below); and the operators a step runs after its last
  backward task ended, which would otherwise be ``forward``: the update no
  optimizer task holds (a manual ``p.data.add_`` under ``no_grad``,
  ``clip_grad_norm_``, a scaler's unscale);
* ``backward``: the autograd engine's tasks (``autograd::engine::...``,
  ``...Backward0``, ``AccumulateGrad``);
* ``forward``: the other operators (``aten::``, ``autograd::``) called in the
  step;
* ``other_ops``: any other task in the step (oneDNN primitives called
  outside an operator, other libraries' operators, the script's own markers);
* ``python``: the step's time in no task at all.

Phases go by the innermost category: the tasks that count are the step's
children, and the children of what is looked through:

* a range on PyTorch's domain that is not an operator (a name without
  ``::``: ``DistributedDataParallel.forward``, ``record_function`` and
  ``range_push`` blocks, ``ProfilerStep#...``): what it runs counts, its
  own time is ``python``;
* an optimizer's closure (``optimizer.step(closure)``: LBFGS, Lightning's
  automatic optimization), a task of its own, :data:`CLOSURE_TASK`
  (:mod:`instrumenter.runtime.closures`), wherever it runs in the step: what it runs
  counts as if the step had run it (its forward and backward are
  ``forward`` and ``backward``), its own time is ``python``, and its time is
  taken from the counted task it ran in (the ``Optimizer.step``: what stays
  ``optimizer`` is the optimizer's own update).

A step whose tasks are none of forward, backward or optimizer (no operator
tasks: ``--torch-ops off``, TensorFlow, whose oneDNN tasks run on its own
threads) gets ``compute`` for all its tasks instead, and for the time the
step spent while a framework task ran on another thread of its process
(TensorFlow's thread pool), taken from ``python``; where the run was sampled,
:func:`with_samples` then gives ``compute`` the rest of the step's time in no
task but its thread's CPU time in Python (XLA's kernels record no task).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from ...runtime.closures import CLOSURE_TASK
from .intervals import Intervals, merged, overlapping

#: The categories the pass counts children by; STEP marks a step in its holder's row; RANGE and CLOSURE are looked
#: through (the module's docstring).
CATEGORIES = ("other_ops", "forward", "backward", "optimizer", "data", "step", "own", "communication", "range",
              "closure")
OTHER_OPS, FORWARD, BACKWARD, OPTIMIZER, DATA, STEP, OWN, COMMUNICATION, RANGE, CLOSURE = range(len(CATEGORIES))
LOOKED_THROUGH = (RANGE, CLOSURE)

#: The ITT domain libtorch's wrapper (emit_itt, range_push) records on.
TORCH_DOMAIN = "PyTorch"
#: How collectives are named on it: c10d's dispatcher operators, and each process group backend's own ranges.
COMMUNICATION_PREFIXES = ("c10d::", "gloo:", "nccl:", "mpi:", "ucc:")

_BACKWARD = re.compile(r"^autograd::engine::|Backward\d*$|AccumulateGrad")


def category(domain: Optional[str], name: Optional[str], own_domains: Iterable[str],
             step_labels: Iterable[str], batch_labels: Iterable[str] = ()) -> int:
    """A task's category (:data:`CATEGORIES`) by the rules above; ``batch_labels``: the own tasks that make a
    step's batch inside it (``transforms._batches``)."""
    name = name or ""
    if domain in own_domains:
        return STEP if name in step_labels else DATA if name in batch_labels else OWN
    if name == CLOSURE_TASK:
        return CLOSURE
    if name.startswith("enumerate(DataLoader)"):
        return DATA
    if name.startswith(COMMUNICATION_PREFIXES):
        return COMMUNICATION
    if name.startswith("Optimizer."):
        return OPTIMIZER
    if _BACKWARD.search(name):
        return BACKWARD
    if name.startswith(("aten::", "autograd::")):
        return FORWARD
    if domain == TORCH_DOMAIN and "::" not in name:
        return RANGE
    return OTHER_OPS


#: The domain oneDNN records its primitive creations on: one in a steady step is a primitive cache miss.
CREATION_DOMAIN = "dnnl::primitive::create"


@dataclass
class Measured:
    """A step loop's phases over the steps measured: nanoseconds per phase, summed over them."""

    steps: int
    nanoseconds: Dict[str, int]
    #: oneDNN primitive creations begun while these steps ran (any thread of their process), and their time:
    #: a creation that hits oneDNN's primitive cache takes about a microsecond, a miss far longer
    creations: int = 0
    creation_ns: int = 0
    #: the steps measured, per (pid, tid): (starts, ends) in the tasks' clock (CLOCK_MONOTONIC ns), for what the
    #: samples say of them (:func:`with_samples`)
    spans: Dict[Tuple[int, int], Tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Nesting:
    """Instances on one number line, each thread on its own stretch (a search never crosses threads), and
    their nesting depth on their thread (1: outermost)."""

    begin: np.ndarray
    finish: np.ndarray
    floor: np.ndarray  # where each instance's thread's stretch begins
    depth: np.ndarray
    thread: np.ndarray  # each instance's thread, an index into threads
    threads: np.ndarray  # (pid << 32) | tid
    span: int
    base: int


def nesting(tasks: Intervals) -> Optional[Nesting]:
    """The instances of ``tasks`` (tasks on a thread nest) on one number line, with their depths, computed with
    sorts, not a walk; None if the line would not fit in 62 bits."""
    key = (tasks.pid.astype(np.int64) << 32) | (tasks.tid.astype(np.int64) & 0xFFFFFFFF)
    threads, thread = np.unique(key, return_inverse=True)
    base = int(tasks.start.min())
    span = int(tasks.end.max()) - base + 2
    if span * len(threads) >= 1 << 62:
        return None
    begin = thread * span + (tasks.start - base)
    finish = thread * span + (tasks.end - base)
    floor = thread * span
    order = np.lexsort((-finish, begin))  # by start; a parent before the child starting with it
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    opened = rank - np.searchsorted(begin[order], floor) + 1
    ends = np.sort(finish)
    closed = np.searchsorted(ends, begin, side="right") - np.searchsorted(ends, floor) - (finish == begin)
    return Nesting(begin, finish, floor, opened - closed, thread, threads, span, base)


def measure(tasks: Intervals, chosen: np.ndarray, loop: np.ndarray, category_of: np.ndarray,
            creation: np.ndarray) -> Optional[Measured]:
    """The phases of the steps ``chosen`` (indices into ``tasks``), by the rules above.

    ``tasks`` must hold every instance of the threads and processes of those steps while they ran (the
    pass keeps them all, or those overlapping its window of steps); ``loop``: every instance of the
    loop's steps (for the one before each chosen step), ``category_of`` and ``creation``: per group, its
    category and whether it is a oneDNN primitive creation. A task's parent is found by nesting depth on
    its thread (tasks on a thread nest), computed with sorts, not a walk."""
    if not len(chosen):
        return None
    line = nesting(tasks)
    if line is None:
        return None
    begin, finish, floor, depth = line.begin, line.finish, line.floor, line.depth
    thread, threads, span, base = line.thread, line.threads, line.span, line.base

    # the chosen steps in time order, and each instance's step: the last chosen step starting at or before it
    chosen = chosen[np.argsort(begin[chosen], kind="stable")]
    s_begin, s_finish, s_depth = begin[chosen], finish[chosen], depth[chosen]
    at = np.searchsorted(s_begin, begin, side="right") - 1
    holder = np.maximum(at, 0)
    inside = (at >= 0) & (finish <= s_finish[holder]) & (depth > s_depth[holder])
    child = inside & (depth == s_depth[holder] + 1)
    duration = (tasks.end - tasks.start).astype(np.float64)
    categories = category_of[tasks.group]
    counted, closures = _counted(begin, finish, depth, inside, child, categories)
    categories = _update_after_backward(categories, counted, at, begin, finish, len(chosen))
    by_category = np.bincount(categories[counted], weights=duration[counted], minlength=len(CATEGORIES))
    for closure, holder_of in closures:
        by_category[categories[holder_of]] -= duration[closure]
    step_time = float((s_finish - s_begin).sum())

    # before each step, the time since the previous step of the loop ended (or since the loop began):
    # waiting for the batch, less the own regions run there (an evaluation between steps)
    all_begin = np.sort(begin[loop])
    all_finish = finish[loop][np.argsort(begin[loop], kind="stable")]
    previous = np.searchsorted(all_begin, s_begin, side="left") - 1
    gap_from = np.where(previous >= 0, all_finish[np.maximum(previous, 0)], -1)
    gap_from = np.where(gap_from >= floor[chosen], gap_from, -1)  # the same thread's only
    gap_from = np.maximum(gap_from, _parent_start(begin, finish, depth, chosen))
    gap = np.where(gap_from >= 0, s_begin - gap_from, 0)
    sibling = (categories == OWN) & (at + 1 < len(chosen))
    following = np.minimum(at + 1, len(chosen) - 1)
    sibling &= (depth == s_depth[following]) & (begin >= gap_from[following]) & (finish <= s_begin[following])
    gap_own = np.bincount(following[sibling], weights=duration[sibling], minlength=len(chosen))
    between = float(np.maximum(gap - gap_own, 0).sum())

    nanoseconds = {"data": between + by_category[DATA]}
    operators = by_category[[FORWARD, BACKWARD, OPTIMIZER]]
    python = step_time - float(by_category.sum())
    rest = float(by_category[[OTHER_OPS, STEP, OWN]].sum())
    spans = _step_spans(tasks, chosen)
    waited = 0.0
    if (categories == COMMUNICATION).any():  # where the step's thread waits, only for a collective to overlap
        gaps = _outside_tasks(begin, finish, chosen, counted, closures, thread, threads, span, base)
        waited = min(_waited(tasks, categories, gaps), max(python, 0.0))
    python -= waited
    if by_category[COMMUNICATION] or waited:
        nanoseconds["communication"] = float(by_category[COMMUNICATION]) + waited
    if operators.any():
        nanoseconds.update(forward=float(by_category[FORWARD]), backward=float(by_category[BACKWARD]),
                           optimizer=float(by_category[OPTIMIZER]), other_ops=rest)
    else:
        # no operator task on the steps' threads: the framework's work on its own threads (TensorFlow's
        # oneDNN primitives), while the step waited for it, is the step's compute
        elsewhere = _covered_elsewhere(tasks, thread, categories, chosen, spans)
        elsewhere = min(elsewhere, max(python, 0.0))
        nanoseconds["compute"] = rest + elsewhere
        python -= elsewhere
    nanoseconds["python"] = max(python, 0.0)
    created = _inside_steps(tasks, spans, creation[tasks.group])
    threads_of = {}
    for pid, tid in set(zip(tasks.pid[chosen].tolist(), tasks.tid[chosen].tolist())):
        mine = chosen[(tasks.pid[chosen] == pid) & (tasks.tid[chosen] == tid)]
        threads_of[(pid, tid)] = (tasks.start[mine].astype(np.int64), tasks.end[mine].astype(np.int64))
    return Measured(len(chosen), {name: int(round(ns)) for name, ns in nanoseconds.items()},
                    int(created.sum()), int((tasks.end[created] - tasks.start[created]).sum()), threads_of)


def _update_after_backward(categories, counted, at, begin, finish, steps: int) -> np.ndarray:
    """``categories`` with the counted operators a step runs after its last backward task ended as
    ``optimizer``: the update (a manual ``p.data.add_`` under ``no_grad``, ``clip_grad_norm_``), which no
    optimizer task holds. A step with no backward keeps its operators ``forward``."""
    backward = np.flatnonzero(counted & (categories == BACKWARD))
    if not len(backward):
        return categories
    last = np.full(steps, -1, np.int64)  # per step, where its last backward ended (-1: it ran none)
    np.maximum.at(last, at[backward], finish[backward])
    ended = last[np.maximum(at, 0)]
    after = counted & (categories == FORWARD) & (at >= 0) & (ended >= 0) & (begin >= ended)
    if not after.any():
        return categories
    categories = categories.copy()
    categories[after] = OPTIMIZER
    return categories


def with_samples(found: Dict[str, Dict[str, float]], python_s: float) -> Dict[str, Dict[str, float]]:
    """Phases without operator tasks (``compute``), refined by the samples: ``python_s``, the steps' threads'
    CPU time per step in Python (the interpreter and what it runs, not the framework's native code), is the
    ``python`` phase, and the rest of the step's time in no task is the framework's: ``compute`` (TensorFlow's
    executor, XLA's compiled code, the wait for its threads). Phases with operators are returned as they are."""
    if "compute" not in found or "python" not in found:
        return found
    seconds = {name: phase["seconds_per_step"] for name, phase in found.items()}
    moved = max(seconds["python"] - python_s, 0.0)
    seconds["python"] -= moved
    seconds["compute"] += moved
    total = sum(seconds.values())
    return {name: {"seconds_per_step": value, "share": value / total if total else 0.0}
            for name, value in seconds.items()}


def _counted(begin, finish, depth, inside, child, categories) -> Tuple[np.ndarray, List[Tuple[int, int]]]:
    """Which instances count for their steps' phases (the steps' children, and the children of what is looked
    through: :data:`LOOKED_THROUGH`), and each closure with the counted instance it ran in, if one did."""
    through = np.isin(categories, LOOKED_THROUGH)
    if not (inside & through).any():
        return child, []
    closure = categories == CLOSURE
    within = np.flatnonzero(inside)
    parent = np.full(len(begin), -1, np.int64)
    parent[within] = parents(begin, finish, depth, within)
    reached = child | (inside & closure)
    for level in np.unique(depth[within]).tolist():  # a parent's level before its children's
        mine = within[depth[within] == level]
        mine = mine[parent[mine] >= 0]
        up = parent[mine]
        reached[mine] |= reached[up] & through[up]
    counted = reached & ~through
    pairs = []
    for instance in np.flatnonzero(inside & closure).tolist():
        holder = parent[instance]
        while holder >= 0 and not counted[holder]:
            holder = parent[holder]
        if holder >= 0:
            pairs.append((instance, holder))
    return counted, pairs


def parents(begin, finish, depth, which) -> np.ndarray:
    """Per instance of ``which``, the instance holding it (one level up on its thread); -1: none."""
    result = np.full(len(which), -1, np.int64)
    for level in np.unique(depth[which]).tolist():
        parents = np.flatnonzero(depth == level - 1)
        if not len(parents):
            continue
        parents = parents[np.argsort(begin[parents], kind="stable")]
        mine = np.flatnonzero(depth[which] == level)
        at = np.searchsorted(begin[parents], begin[which[mine]], side="right") - 1
        ok = (at >= 0) & (finish[parents[np.maximum(at, 0)]] >= finish[which[mine]])
        result[mine[ok]] = parents[at[ok]]
    return result


def _parent_start(begin, finish, depth, chosen) -> np.ndarray:
    """Per chosen step, where the instance holding it (one level up on its thread) begins; -1: none."""
    parent = parents(begin, finish, depth, chosen)
    return np.where(parent >= 0, begin[np.maximum(parent, 0)], -1)


def _outside_tasks(begin, finish, chosen, counted, closures, thread, threads, span, base
                   ) -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """Per process, the chosen steps' time in no counted task (a closure's own time included), as
    ``(starts, ends)`` in the tasks' clock: where the step's thread waits. On the threads' one number line,
    then back to each thread's own clock."""
    holders = np.array(sorted({holder for _closure, holder in closures}), np.int64)
    inner = np.array([closure for closure, _holder in closures], np.int64)
    leaves = counted.copy()
    leaves[holders] = False
    gaps = _minus((begin[chosen], finish[chosen]), (begin[leaves], finish[leaves]))
    if len(holders):
        gaps = _minus(gaps, _minus((begin[holders], finish[holders]), (begin[inner], finish[inner])))
    starts, ends = gaps
    line = starts // span
    pid = threads[line] >> 32
    shift = base - line * span
    return {p: (starts[pid == p] + shift[pid == p], ends[pid == p] + shift[pid == p])
            for p in np.unique(pid).tolist()}


def _minus(a: Tuple[np.ndarray, np.ndarray], b: Tuple[np.ndarray, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """The time in spans ``a`` and in none of spans ``b`` (either may overlap itself), as sorted, disjoint
    pieces."""
    (a_start, a_end), (b_start, b_end) = a, b
    points = np.concatenate([a_start, a_end, b_start, b_end]).astype(np.int64)
    if not len(points):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    na, nb = len(a_start), len(b_start)
    in_a = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)])
    in_b = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)])
    order = np.argsort(points, kind="stable")
    at = points[order]
    a_open, b_open = np.cumsum(in_a[order]), np.cumsum(in_b[order])
    keep = (a_open[:-1] > 0) & (b_open[:-1] == 0) & (at[1:] > at[:-1])
    return at[:-1][keep], at[1:][keep]


def _waited(tasks: Intervals, categories: np.ndarray, gaps: Dict[int, Tuple[np.ndarray, np.ndarray]]) -> float:
    """The steps' time outside tasks (``gaps``, per process) while a collective ran on another thread of their
    process."""
    return _busy_during(tasks, categories == COMMUNICATION, gaps)


def _busy_during(tasks: Intervals, busy: np.ndarray, spans: Dict[int, Tuple[np.ndarray, np.ndarray]]) -> float:
    """How much of ``spans`` (per process) the ``busy`` instances of that process cover."""
    total = 0.0
    for pid, (starts, ends) in spans.items():
        mine = busy & (tasks.pid == pid)
        if len(starts) and mine.any():
            total += _overlap(merged(tasks.start[mine].tolist(), tasks.end[mine].tolist()), (starts, ends))
    return total


def _step_spans(tasks: Intervals, chosen: np.ndarray) -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """Per process, the chosen steps' spans, merged."""
    spans = {}
    for pid in np.unique(tasks.pid[chosen]).tolist():
        mine = chosen[tasks.pid[chosen] == pid]
        spans[pid] = merged(tasks.start[mine].tolist(), tasks.end[mine].tolist())
    return spans


def _covered_elsewhere(tasks: Intervals, thread: np.ndarray, categories: np.ndarray, chosen: np.ndarray,
                       spans: Dict[int, Tuple[np.ndarray, np.ndarray]]) -> float:
    """The chosen steps' time (``spans``, per process) during which a framework task ran on another thread of
    their process."""
    other = ~np.isin(thread, np.unique(thread[chosen])) & (categories != OWN) & (categories != STEP)
    return _busy_during(tasks, other, spans)


def _overlap(a: Tuple[np.ndarray, np.ndarray], b: Tuple[np.ndarray, np.ndarray]) -> float:
    """The length of the intersection of two sets of sorted, disjoint spans."""
    starts, ends = a
    covered = np.concatenate([[0], np.cumsum(ends - starts)])

    def before(t: np.ndarray) -> np.ndarray:  # covered length of ``a`` before each time t
        i = np.searchsorted(starts, t, side="right")
        inside = np.minimum(t, ends[np.maximum(i - 1, 0)]) - starts[np.maximum(i - 1, 0)]
        return covered[np.maximum(i - 1, 0)] + np.where(i > 0, inside, 0)

    return float((before(b[1]) - before(b[0])).sum())


def _inside_steps(tasks: Intervals, spans: Dict[int, Tuple[np.ndarray, np.ndarray]],
                  selected: np.ndarray) -> np.ndarray:
    """Which of the ``selected`` instances began inside one of the steps of their process (``spans``)."""
    inside = np.zeros(len(tasks), np.bool_)
    for pid, steps in spans.items():
        mine = np.flatnonzero(selected & (tasks.pid == pid))
        if len(mine):
            inside[mine] = overlapping(steps, tasks.start[mine], tasks.start[mine])
    return inside
