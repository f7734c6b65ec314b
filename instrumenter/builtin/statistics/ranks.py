"""A multi-process run, rank by rank: step statistics per rank, and the stragglers.

A process has a rank when a launcher gave it one (torchrun, MPI, Slurm: see
the trace format); DataLoader workers forked by a rank share its rank. A run
is multi-rank when its processes have two distinct ranks or more: one rank
alone (``mpirun -n 1``, ``RANK=0`` left in the environment) is a plain run,
with nothing rank-specific in the summary or the Chrome trace. With ranks,
the ith step of every rank is one step of the run: its time is set by the
slowest rank, so per step the spread between the fastest and the slowest
rank is time the others spent waiting (in an all-reduce, say).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Sequence

import numpy as np

from .summary import RankStats, Straggler
from .aggregate import Intervals
from .taskstats import step_stats

if TYPE_CHECKING:
    from ...profile.read_context import ReadContext


def ranked(traces: Iterable) -> bool:
    """Whether the run is multi-rank: its processes have two distinct ranks or more."""
    return len({trace.rank for trace in traces if trace.rank is not None}) >= 2


def rank_stats(traces: Sequence, kept: Intervals, groups: List[tuple], context: ReadContext) -> List[RankStats]:
    """Step statistics per rank, for the processes that have one; an empty list unless :func:`ranked`."""
    if not ranked(traces):
        return []
    rank_of = {trace.pid: trace.rank for trace in traces if trace.rank is not None}
    result = []
    for rank in sorted(set(rank_of.values())):
        pids = sorted(pid for pid, r in rank_of.items() if r == rank)
        own = kept.take(np.isin(kept.pid, pids))
        result.append(RankStats(rank=rank, pids=pids, steps=step_stats(own, groups, context)))
    return result


def stragglers(ranks: Sequence[RankStats]) -> List[Straggler]:
    """Per step label run by two ranks or more: how far the slowest rank trails, and which one it is."""
    durations: Dict[str, Dict[int, Sequence[float]]] = {}
    for rank in ranks:
        for step in rank.steps:
            durations.setdefault(step.label, {})[rank.rank] = step.durations_s
    result = []
    for label, by_rank in durations.items():
        if len(by_rank) < 2:
            continue
        order = sorted(by_rank)
        compared = min(len(steps) for steps in by_rank.values())
        if not compared:
            continue
        # row i: rank order[i]; column j: its jth step
        times = np.stack([np.asarray(by_rank[rank][:compared], np.float64) for rank in order])
        spreads = times.max(axis=0) - times.min(axis=0)
        slowest = np.bincount(times.argmax(axis=0), minlength=len(order))
        worst = int(slowest.argmax())  # the first rank among the most often slowest
        result.append(Straggler(label=label, ranks=order, steps=compared,
                                spread_mean_s=float(spreads.mean()), spread_max_s=float(spreads.max()),
                                slowest_rank=order[worst], slowest_count=int(slowest[worst]),
                                slowest_counts={str(rank): int(n) for rank, n in zip(order, slowest)}))
    return result
