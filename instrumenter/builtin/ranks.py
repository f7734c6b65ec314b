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

import statistics
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence

from ..summary import RankStats, Straggler
from .taskstats import Interval, step_stats


def ranked(traces: Iterable) -> bool:
    """Whether the run is multi-rank: its processes have two distinct ranks or more."""
    return len({trace.rank for trace in traces if trace.rank is not None}) >= 2


def rank_stats(traces: Sequence, items: Sequence[Interval], step_labels: Iterable[str],
               domains: Optional[Iterable[str]]) -> List[RankStats]:
    """Step statistics per rank, for the processes that have one; an empty list unless :func:`ranked`."""
    if not ranked(traces):
        return []
    rank_of = {trace.pid: trace.rank for trace in traces if trace.rank is not None}
    labels = list(step_labels)
    result = []
    for rank in sorted(set(rank_of.values())):
        pids = sorted(pid for pid, r in rank_of.items() if r == rank)
        own = [item for item in items if item.pid in pids]
        result.append(RankStats(rank=rank, pids=pids, steps=step_stats(own, labels, domains)))
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
        compared = min(len(steps) for steps in by_rank.values())
        spreads, slowest = [], Counter()
        for index in range(compared):
            times = {rank: steps[index] for rank, steps in by_rank.items()}
            spreads.append(max(times.values()) - min(times.values()))
            slowest[max(times, key=times.get)] += 1
        if not spreads:
            continue
        worst, often = slowest.most_common(1)[0]
        result.append(Straggler(label=label, ranks=sorted(by_rank), steps=compared,
                                spread_mean_s=statistics.fmean(spreads), spread_max_s=max(spreads),
                                slowest_rank=worst, slowest_count=often,
                                slowest_counts={str(rank): slowest[rank] for rank in sorted(by_rank)}))
    return result
