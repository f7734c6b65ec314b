"""The trace's record clock (TSC ticks or CLOCK_MONOTONIC ns) to CLOCK_MONOTONIC ns: see Timestamps in
:mod:`.tracefile`."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

#: Clock pairs closer than this are not kept (but the latest always is): the rate between two kept pairs
#: is measured over 100 ms at least, so the ~20 ns of a pair's own jitter stays below 1e-6 of it.
PAIR_SPACING_NS = 100_000_000


class Clock:
    """The record clock of one file, to CLOCK_MONOTONIC ns (see Timestamps): pairs (ticks, ns) kept at
    least :data:`PAIR_SPACING_NS` apart, the last one always the latest."""

    def __init__(self, ticks: int, mono: int, tsc: bool) -> None:
        self.tsc = tsc
        self.ticks, self.mono = [ticks], [mono]
        self._arrays: Optional[Tuple[np.ndarray, np.ndarray]] = None

    def add(self, ticks: int, mono: int) -> None:
        if not self.tsc or ticks <= self.ticks[-1]:
            return
        if len(self.ticks) >= 2 and mono - self.mono[-2] < PAIR_SPACING_NS:
            self.ticks[-1], self.mono[-1] = ticks, mono
        else:
            self.ticks.append(ticks)
            self.mono.append(mono)
        self._arrays = None

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        if not self.tsc:
            return ticks
        t0, m0 = self.ticks[0], self.mono[0]
        if self._arrays is None:
            self._arrays = (np.array(self.ticks, np.float64) - t0, np.array(self.mono, np.float64) - m0)
        xp, fp = self._arrays
        since = (ticks.astype(np.int64) - np.int64(t0)).astype(np.float64)
        ns = np.interp(since, xp, fp)
        beyond = since > xp[-1]
        if beyond.any():
            slope = fp[-1] / xp[-1] if xp[-1] > 0 else 1.0
            ns[beyond] = fp[-1] + (since[beyond] - xp[-1]) * slope
        return (np.rint(ns).astype(np.int64) + m0).astype(np.uint64)
