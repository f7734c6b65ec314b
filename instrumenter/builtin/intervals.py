"""Task instances as parallel arrays: what the streaming pass keeps, the timeline shows and steps are read from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np


@dataclass
class Intervals:
    """Task instances as parallel arrays (times in ns, ``group`` an index into :attr:`Aggregates.groups`).

    :attr:`Aggregates.kept` is ordered by process and thread, each thread's finished instances in the
    order they began, then its unfinished ones.
    """

    pid: np.ndarray
    tid: np.ndarray
    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    self_ns: np.ndarray
    depth: np.ndarray
    finished: np.ndarray

    FIELDS = ("pid", "tid", "group", "start", "end", "self_ns", "depth", "finished")

    @classmethod
    def empty(cls) -> "Intervals":
        return cls(*(np.zeros(0, np.bool_ if name == "finished" else np.int64) for name in cls.FIELDS))

    @classmethod
    def concat(cls, parts: Sequence["Intervals"]) -> "Intervals":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in cls.FIELDS))

    def take(self, selector) -> "Intervals":
        """The instances a boolean mask or index array selects."""
        return Intervals(*(getattr(self, name)[selector] for name in self.FIELDS))

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def __len__(self) -> int:
        return len(self.start)


def overlapping(spans: Optional[Tuple[np.ndarray, np.ndarray]], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which instances overlap one of ``spans`` (sorted, disjoint: (starts, ends))."""
    if spans is None or not len(spans[0]):
        return np.zeros(len(start), np.bool_)
    starts, ends = spans
    # the last span starting at or before an instance's end is the only one that can overlap it
    index = np.searchsorted(starts, end, side="right") - 1
    return (index >= 0) & (ends[np.maximum(index, 0)] >= start)
