"""Task instances as parallel arrays: what the streaming pass keeps (as a :class:`Keep` policy says), the
timeline shows and steps are read from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np


@dataclass
class Intervals:
    """Task instances as parallel arrays (times in ns, ``group`` an index into :attr:`Aggregates.groups`).

    :attr:`Aggregates.kept` is ordered by process and thread; in a thread, instances that do not overlap
    (a task's steps) are in the order they began, and unfinished ones come last. 31 bytes an instance (:data:`TYPES`): a run of millions of
    steps keeps them all.
    """

    pid: np.ndarray
    tid: np.ndarray
    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    finished: np.ndarray

    FIELDS = ("pid", "tid", "group", "start", "end", "depth", "finished")
    TYPES = (np.int32, np.int32, np.int32, np.int64, np.int64, np.int16, np.bool_)

    @classmethod
    def of(cls, *columns) -> "Intervals":
        """From columns in :data:`FIELDS` order (scalars for pid and tid), converted to :data:`TYPES`."""
        n = len(columns[3])
        return cls(*(np.full(n, c, t) if np.isscalar(c) else np.asarray(c, t) for c, t in zip(columns, cls.TYPES)))

    @classmethod
    def empty(cls) -> "Intervals":
        return cls(*(np.zeros(0, t) for t in cls.TYPES))

    @classmethod
    def concat(cls, parts: Sequence["Intervals"], consume: bool = False) -> "Intervals":
        """The parts one after the other. ``consume``: the parts are emptied field by field as they are
        copied, so the copy needs one field's worth more memory, not the whole."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        columns = []
        for name in cls.FIELDS:
            columns.append(np.concatenate([getattr(p, name) for p in parts]))
            if consume:
                for part in parts:
                    setattr(part, name, None)
        return cls(*columns)

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


class Keep:
    """Which instances outside the run's own domains a pass keeps.

    ``limit``: all of them while they are at most that many (``None``: no limit); past it, none (and
    :attr:`overflowed`). ``spans``: per pid, sorted disjoint (starts, ends): those overlapping a span.
    """

    def __init__(self, limit: Optional[int] = None,
                 spans: Optional[Dict[int, Tuple[np.ndarray, np.ndarray]]] = None) -> None:
        self.limit = limit
        self.spans = spans
        self.kept = 0
        self.overflowed = False

    def others(self, pid: int, start: np.ndarray, end: np.ndarray) -> Optional[np.ndarray]:
        """A mask of the instances to keep among these (``None``: all of them)."""
        if self.spans is not None:
            return overlapping(self.spans.get(pid), start, end)
        if self.overflowed:
            return np.zeros(len(start), np.bool_)
        self.kept += len(start)
        if self.limit is not None and self.kept > self.limit:
            self.overflowed = True
            return np.zeros(len(start), np.bool_)
        return None
