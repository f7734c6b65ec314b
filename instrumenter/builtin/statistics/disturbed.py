"""Recorded iterations that ran far longer than their peers (``--torch-ops sampled``).

With operators recorded in a sample of the iterations (20 of 200, say), the phases and the operator table stand
on few of them, and one disturbed iteration weighs on both: on a busy machine two runnable threads take turns
on a core for milliseconds at a time, and a turn lost inside one recorded operator of a millisecond step makes
that operator the run's most expensive, scaled up tenfold. The same holds for the first iterations recorded
(2-11 by default), warm-up that the whole run would otherwise be scaled from. So of the recorded iterations of
a task, its warm-up and those that ran more than :data:`DISTURBED` times the median of the rest are left out:
of the phases, and, where their tasks were kept (every task of a run of at most a million, else those of the
timeline's window, where the warm-up is), of the operator table (:mod:`.estimates`), whose scale then
counts the iterations left in. A run that records every iteration (``--torch-ops all``) has no few to protect and leaves nothing
out: its operator table is the whole run's, warm-up included, as torch.profiler's would be.

Input is the kept instances (:class:`~instrumenter.builtin.statistics.intervals.Intervals`) and the run's
:class:`~instrumenter.runtime.torch_ops.OperatorSampling`; output is each task's :class:`Recorded` iterations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .intervals import Intervals

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
