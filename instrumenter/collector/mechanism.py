"""Which sampling mechanism a run uses, chosen by what a perf interruption costs on this machine.

The collector samples with a perf_event_open cpu-clock event per thread, else
with POSIX CPU-time timers (``sampler.h``). Where an hrtimer expiry is cheap
(bare metal: 1-2 µs) perf gives a true 1 kHz; in a VM each expiry exits to the
hypervisor (25-36 µs measured here), and a PyTorch loop slows by about four
times that, its caches refilled after each exit: 1.15x to 1.35x at 1 kHz.
Timers ride on the scheduler tick (at most 250 samples a second here, each
weighted by the periods it stands for); a sample costs too (its signal and the
handler's walk of the stacks: 0.07-0.14 ms of a PyTorch step in this VM), so where
the user gave no rate they sample at :data:`~instrumenter.collector.formats.SAMPLE_HZ_TIMER`
(50) a second: about 0.8 % of a 0.45 ms conv step, where 100 cost about 1.1 % and
250 2.2 % (benchmarks/README.md, ``bench_step_parts.py``).

:func:`choose` measures once per ``autoitt profile``, in autoitt's own process
(``_interrupt_cost``, C, bound with ctypes: about 50 ms), and the run gets
``AUTOITT_SAMPLE_MECHANISM``. A mechanism the user set in the environment is
kept, and so is perf wherever the measure cannot be taken.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from .formats import SAMPLE_HZ_TIMER

#: The collector's variable (sampler.c): ``perf`` or ``timer``.
VARIABLE = "AUTOITT_SAMPLE_MECHANISM"
MECHANISMS = ("perf", "timer")
#: Above this, an interruption costs the loop enough that timers are used: bare metal is far below (1-2 µs),
#: the VMs measured far above (25-36 µs).
THRESHOLD_NS = 10_000
#: The measure: the event's rate, rounds (median), and a loop of about 2 ms of CPU each time.
_HZ, _ROUNDS, _ITERATIONS = 20_000, 5, 1_500_000


@dataclass(frozen=True)
class Choice:
    """The mechanism a run samples with, and why: ``cost_ns`` is one perf interruption's measured cost
    (None: not measured); ``hz``, the rate it samples at where the user chose none (None: the collector's
    default); ``timer_hz``, with perf, the rate if the collector finds perf refused and falls back to timers
    (None: perf's)."""

    mechanism: str
    why: str
    cost_ns: Optional[float] = None
    hz: Optional[int] = None
    timer_hz: Optional[int] = None

    def environment(self) -> Dict[str, str]:
        rate = {"AUTOITT_SAMPLE_HZ": str(self.hz)} if self.hz is not None else {}
        if self.timer_hz is not None:
            rate["AUTOITT_SAMPLE_TIMER_HZ"] = str(self.timer_hz)
        return {VARIABLE: self.mechanism, **rate}

    def to_json(self) -> dict:
        return {"mechanism": self.mechanism, "why": self.why, "perf_interrupt_ns": self.cost_ns}


def perf_interrupt_ns() -> Optional[float]:
    """What one perf cpu-clock interruption costs this thread, in ns of its CPU time; None where perf is
    refused (``perf_event_paranoid`` 3, seccomp) or the measure library is missing."""
    spec = importlib.util.find_spec("instrumenter.collector._interrupt_cost")
    if spec is None or not spec.origin:
        return None
    library = ctypes.CDLL(spec.origin)
    measure = library.autoitt_perf_interrupt_ns
    measure.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    measure.restype = ctypes.c_int
    found = ctypes.c_double()
    # SIGURG: ignored by default, so one left pending after the measure would do nothing
    if measure(_HZ, _ROUNDS, _ITERATIONS, int(signal.SIGURG), ctypes.byref(found)) != 0:
        return None
    return max(found.value, 0.0)


def choose(environ: Optional[Mapping[str, str]] = None, rate_given: bool = False) -> Choice:
    """The mechanism for a run: the user's (``AUTOITT_SAMPLE_MECHANISM``), else timers where a perf
    interruption costs more than :data:`THRESHOLD_NS`, else perf; with timers, and no rate the user gave
    (``rate_given``), :data:`~instrumenter.collector.formats.SAMPLE_HZ_TIMER` samples a second."""
    given = (os.environ if environ is None else environ).get(VARIABLE, "")
    # perf may still be refused inside the run (a container's seccomp, perf_event_paranoid 3): the collector then
    # falls back to timers, at their own rate too unless the user gave one
    fallback = None if rate_given else SAMPLE_HZ_TIMER
    if given in MECHANISMS:
        if given == "timer":
            return Choice(given, f"{VARIABLE}={given}", hz=fallback)
        return Choice(given, f"{VARIABLE}={given}", timer_hz=fallback)
    cost = perf_interrupt_ns()
    if cost is None:
        return Choice("perf", "perf's cost could not be measured here: the collector tries perf, then timers",
                      timer_hz=fallback)
    if cost > THRESHOLD_NS:
        rate = "at the scheduler tick's rate at most" if rate_given else f"{SAMPLE_HZ_TIMER} a second"
        return Choice("timer", f"a perf interruption costs {cost / 1000:.0f} µs of CPU here (1-2 µs on bare metal; "
                               "a VM's exits to its hypervisor cost this), so CPU-time timers sample instead: "
                               f"{rate}, each sample weighted", cost, None if rate_given else SAMPLE_HZ_TIMER)
    return Choice("perf", f"a perf interruption costs {cost / 1000:.1f} µs of CPU here", cost, timer_hz=fallback)
