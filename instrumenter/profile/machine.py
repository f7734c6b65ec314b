"""What else the machine did while a run ran: the CPU time of every process on it, against the run's own.

A step that is slow because other work took the cores looks like a slow step,
or like a long warm-up. autoitt reads ``/proc/stat`` (the machine's busy CPU
time) and its own children's CPU time (``getrusage(RUSAGE_CHILDREN)``: the
run's processes, each counted when its parent waited for it) before and after
the run; the difference is the other work (:class:`Usage`), which the summary
notes when it is large (:mod:`instrumenter.builtin.output.notes`).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Dict, Optional


@dataclass(frozen=True)
class Usage:
    """CPU seconds at one moment: the machine's busy time, this process's children's, this process's own."""

    machine_s: float
    children_s: float
    own_s: float

    @classmethod
    def now(cls) -> Optional["Usage"]:
        """The usage now; None where ``/proc/stat`` cannot be read (not Linux)."""
        try:
            with open("/proc/stat") as handle:
                fields = handle.readline().split()
        except OSError:
            return None
        if not fields or fields[0] != "cpu":
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        # user nice system idle iowait irq softirq steal (guest time is in user already)
        values = [int(v) for v in fields[1:9]] + [0] * max(0, 9 - len(fields))
        busy = sum(values[i] for i in (0, 1, 2, 5, 6, 7)) / ticks
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = resource.getrusage(resource.RUSAGE_SELF)
        return cls(busy, children.ru_utime + children.ru_stime, own.ru_utime + own.ru_stime)


def during(before: Optional[Usage], after: Optional[Usage], elapsed_s: float) -> Optional[Dict[str, float]]:
    """What ``run.json`` keeps of the machine during a run: ``cpus`` (this process may run on), ``run_cpu_s``
    (the run's processes), ``other_cpu_s`` (every other process, autoitt's own wait included, which is next to
    nothing) over ``elapsed_s``; None without readings."""
    if before is None or after is None or elapsed_s <= 0:
        return None
    run = after.children_s - before.children_s
    other = (after.machine_s - before.machine_s) - run - (after.own_s - before.own_s)
    return {"cpus": float(len(os.sched_getaffinity(0))), "run_cpu_s": run, "other_cpu_s": max(other, 0.0),
            "elapsed_s": elapsed_s}
