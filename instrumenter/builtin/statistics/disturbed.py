"""Recorded iterations that ran far longer than their peers (``--torch-ops sampled``), and the operators they held.

With operators recorded in a sample of the iterations (20 of 200, say), the phases and the operator table stand
on few of them, and one disturbed iteration weighs on both: on a busy machine two runnable threads take turns
on a core for milliseconds at a time, and a turn lost inside one recorded operator of a millisecond step makes
that operator the run's most expensive, scaled up tenfold. The same holds for the first iterations recorded
(2-11 by default), warm-up that the whole run would otherwise be scaled from. So of the recorded iterations of
a task, its warm-up and those that ran more than :data:`DISTURBED` times the median of the rest are left out:
of the phases, and, where their tasks were kept (every task of a run of at most a million, else those of the
timeline's window, where the warm-up is), of the operator table, whose scale then counts the iterations
left in. A run that records every iteration (``--torch-ops all``) has no few to protect and leaves nothing
out: its operator table is the whole run's, warm-up included, as torch.profiler's would be.

Input is the kept instances (:class:`~instrumenter.builtin.statistics.intervals.Intervals`) and the run's
:class:`~instrumenter.runtime.torch_ops.OperatorSampling`; output is plain arrays per group, for
:mod:`instrumenter.builtin.statistics.taskstats`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from .aggregate import LIBRARY_DOMAINS
from .intervals import Intervals, near_spans
from .phases import nesting, parents

if TYPE_CHECKING:
    from .aggregate import Aggregates

#: A recorded iteration that ran more than this many times the median of its task's recorded iterations
#: (past their warm-up) was disturbed. A turn lost to another thread is a few milliseconds (seen here: a step
#: of 0.5 ms took 2.9 and 4.7, one of 2.1 ms took 6.0 to 10.4); a long iteration that lost one is barely
#: changed, and counted as it ran. Iterations of one loop also differ by their own work: a Lightning loop of
#: 1024-wide layers here alternates runs of 22 ms and 45-55 ms steps with different splits, which must all
#: count, so the bound sits above such twofold differences.
DISTURBED = 2.5


@dataclass(frozen=True)
class Recorded:
    """One task's iterations that recorded their operators (indices into the kept instances): those
    measured, and those left out: the first ones (warm-up) and the disturbed."""

    measured: np.ndarray
    warmup: np.ndarray
    disturbed: np.ndarray


def split_recorded(kept: Intervals, picked: np.ndarray, warm: int) -> Recorded:
    """``picked``: a task's finished iterations that recorded operators, in kept order; ``warm``: how many first
    ones are warm-up. The rest, split by :data:`DISTURBED`."""
    first, after = picked[:warm], picked[warm:]
    if not len(after):
        return Recorded(after, first, after)
    durations = kept.end[after] - kept.start[after]
    calm = durations <= DISTURBED * float(np.median(durations))
    return Recorded(after[calm], first, after[~calm])


@dataclass(frozen=True)
class Inside:
    """Per group (an index of :attr:`Aggregates.groups`): what the instances inside some iterations add up to,
    in the aggregate's terms (``count``, ``inside_ns``, ``self_ns``, ``self_library_ns``); ``iterations``: how
    many iterations they are."""

    iterations: int
    count: np.ndarray
    inside_ns: np.ndarray
    self_ns: np.ndarray
    self_library_ns: np.ndarray


def tasks_inside(found: Aggregates, iterations: np.ndarray) -> Optional[Inside]:
    """The instances inside ``iterations`` (indices into ``found.kept``), summed per group as the aggregate sums
    the whole run's (a library's task, oneDNN's, counted in its parent's self time with library); only the
    iterations whose tasks were kept count (:meth:`Aggregates.holding`). None: no such iteration."""
    tasks, iterations = found.holding(iterations)
    if not len(iterations):
        return None
    groups = len(found.groups)
    library = np.array([bool(domain) and domain.startswith(LIBRARY_DOMAINS) for domain, _ in found.groups]
                       or [False], np.bool_)
    # the instances of the iterations' processes and time only, so a run of millions nests a few thousand
    near = near_spans(tasks, tasks.pid[iterations], tasks.start[iterations], tasks.end[iterations])
    near[iterations] = True
    remap = np.cumsum(near) - 1
    tasks, iterations = tasks.take(near), remap[iterations]
    line = nesting(tasks)
    if line is None:
        return None
    begin, finish, depth = line.begin, line.finish, line.depth
    chosen = iterations[np.argsort(begin[iterations], kind="stable")]
    at = np.searchsorted(begin[chosen], begin, side="right") - 1
    holder = np.maximum(at, 0)
    within = np.flatnonzero((at >= 0) & (finish <= finish[chosen][holder]) & (depth > depth[chosen][holder]))
    duration = (tasks.end - tasks.start).astype(np.int64)
    parent = parents(begin, finish, depth, within)
    has = parent >= 0
    group = tasks.group.astype(np.int64)
    # self time: less the children's; with library: less the children that are not a library's
    children = np.zeros(len(tasks), np.int64)
    np.add.at(children, parent[has], duration[within[has]])
    not_library = has & ~library[group[within]]
    owned = np.zeros(len(tasks), np.int64)
    np.add.at(owned, parent[not_library], duration[within[not_library]])
    # time inside a group counts once where a task of it is nested directly in itself (as the aggregate's
    # inside time does at any depth: operators that nest in themselves further down are not seen here)
    nested_in_itself = np.zeros(len(within), np.bool_)
    nested_in_itself[has] = group[parent[has]] == group[within[has]]
    mine = group[within]
    return Inside(
        iterations=len(iterations),
        count=np.bincount(mine, minlength=groups),
        inside_ns=np.bincount(mine[~nested_in_itself], weights=duration[within[~nested_in_itself]],
                              minlength=groups).astype(np.int64),
        self_ns=np.bincount(mine, weights=(duration - children)[within], minlength=groups).astype(np.int64),
        self_library_ns=np.bincount(mine, weights=(duration - owned)[within], minlength=groups).astype(np.int64),
    )

