"""What else the machine did while a run ran: the CPU time of every process on it, against the run's own.

A step that is slow because other work took the cores looks like a slow step,
or like a long warm-up. autoitt reads ``/proc/stat`` (the machine's busy CPU
time) and its own children's CPU time (``getrusage(RUSAGE_CHILDREN)``: the
run's processes, each counted when its parent waited for it) before and after
the run; the difference is the other work (:class:`Usage`), which the summary
notes when it is large (:mod:`instrumenter.builtin.output.notes`). Beside it, where readable: the load
average at the run's end (``/proc/loadavg``: the run queue over the last minute), the run queue during the
run (:class:`RunQueue`: ``/proc/stat``'s ``procs_running``, read ten times a second by a thread of autoitt's
own process, never the program's) and the CPUs' mean clock (``/proc/cpuinfo``'s ``cpu MHz``, before and
after), which ``autoitt compare`` weighs too (:mod:`instrumenter.comparison._conditions`). Other work's CPU
time cannot exceed the cores the run left it, so on a machine already full it stops saying how much more
wanted a core; the run queue still does.
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
    #: the CPUs' mean clock, MHz; None where not readable
    mhz: Optional[float] = None

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
        return cls(busy, children.ru_utime + children.ru_stime, own.ru_utime + own.ru_stime, _mhz())


def _mhz() -> Optional[float]:
    """The mean of ``/proc/cpuinfo``'s ``cpu MHz`` lines (what the kernel last saw each CPU run at); None where
    there are none (some architectures, containers that hide it)."""
    try:
        with open("/proc/cpuinfo") as handle:
            values = [float(line.split(":", 1)[1]) for line in handle if line.startswith("cpu MHz")]
    except (OSError, ValueError, IndexError):
        return None
    return sum(values) / len(values) if values else None


def _loadavg() -> Optional[float]:
    """The one-minute load average (runnable and uninterruptible tasks); None where not readable."""
    try:
        with open("/proc/loadavg") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class RunQueue:
    """The machine's runnable threads (``procs_running``: running or waiting for a core, the run's own
    included), read every :attr:`PERIOD` seconds while the ``with`` block runs; :meth:`mean` is their mean.
    Above the cores there are, some thread was waiting for one."""

    PERIOD = 0.1

    def __init__(self) -> None:
        import threading

        self._values: list = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, name="autoitt-run-queue", daemon=True)

    def __enter__(self) -> "RunQueue":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=1.0)

    def _read(self) -> None:
        while not self._done.wait(self.PERIOD):
            try:
                with open("/proc/stat") as handle:
                    found = next((line for line in handle if line.startswith("procs_running ")), None)
            except OSError:
                return
            if found is None:
                return
            # less this thread itself, which is running as it reads
            self._values.append(max(int(found.split()[1]) - 1, 0))

    def mean(self) -> Optional[float]:
        return sum(self._values) / len(self._values) if self._values else None


def during(before: Optional[Usage], after: Optional[Usage], elapsed_s: float,
           run_queue: Optional[float] = None) -> Optional[Dict[str, float]]:
    """What ``run.json`` keeps of the machine during a run: ``cpus`` (this process may run on), ``run_cpu_s``
    (the run's processes), ``other_cpu_s`` (every other process, autoitt's own wait included, which is next to
    nothing) over ``elapsed_s``; where readable, ``loadavg_1m`` (at the end), ``run_queue`` (:class:`RunQueue`'s
    mean) and ``mhz`` (the CPUs' mean clock, before and after); None without readings."""
    if before is None or after is None or elapsed_s <= 0:
        return None
    run = after.children_s - before.children_s
    other = (after.machine_s - before.machine_s) - run - (after.own_s - before.own_s)
    found = {"cpus": float(len(os.sched_getaffinity(0))), "run_cpu_s": run, "other_cpu_s": max(other, 0.0),
             "elapsed_s": elapsed_s}
    load = _loadavg()
    if load is not None:
        found["loadavg_1m"] = load
    if run_queue is not None:
        found["run_queue"] = run_queue
    if before.mhz is not None and after.mhz is not None:
        found["mhz"] = (before.mhz + after.mhz) / 2
    return found
