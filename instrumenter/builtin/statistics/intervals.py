"""Task instances as parallel arrays: what the streaming pass keeps (as a :class:`Keep` policy says, with a
:class:`Window` of steps per process), the timeline shows and steps are read from."""

from __future__ import annotations

from dataclasses import dataclass
from collections import deque
from typing import Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np


@dataclass
class Intervals:
    """Task instances as parallel arrays (times in ns, ``group`` an index into :attr:`Aggregates.groups`).

    :attr:`Aggregates.kept` is ordered by process and thread; in a thread, instances that do not overlap
    (a task's steps) are in the order they began, and unfinished ones come last. 29 bytes an instance
    (:data:`TYPES`): a run of millions of steps keeps them all.
    """

    pid: np.ndarray
    tid: np.ndarray
    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    finished: np.ndarray

    FIELDS = ("pid", "tid", "group", "start", "end", "finished")
    TYPES = (np.int32, np.int32, np.int32, np.int64, np.int64, np.bool_)

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


def near_spans(tasks: "Intervals", pids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which instances of ``tasks`` overlap one of the spans (``starts``, ``ends``) of their own process (``pids``:
    each span's): the instances a few steps of a long run need, whatever thread they ran on."""
    near = np.zeros(len(tasks), np.bool_)
    for pid in np.unique(pids).tolist():
        mine = pids == pid
        spans = merged(starts[mine].tolist(), ends[mine].tolist())
        of_pid = np.flatnonzero(tasks.pid == pid)
        near[of_pid] = overlapping(spans, tasks.start[of_pid], tasks.end[of_pid])
    return near


def merged(starts: Sequence[int], ends: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Spans as sorted, disjoint (starts, ends), for :func:`overlapping`."""
    merged_starts: List[int] = []
    merged_ends: List[int] = []
    for start, end in sorted(zip(starts, ends)):
        if merged_ends and start <= merged_ends[-1]:
            merged_ends[-1] = max(merged_ends[-1], end)
        else:
            merged_starts.append(start)
            merged_ends.append(end)
    return np.array(merged_starts, np.int64), np.array(merged_ends, np.int64)


class Keep:
    """Which instances outside the run's own domains the pass keeps (the own domains' it always keeps).

    All of them while the run's instances number at most ``limit`` (``None``: no limit; past it,
    :attr:`overflowed`, and those kept are dropped); and, whatever their number, those overlapping a
    window of steps (:class:`Window`, one per process): the steps whose 1-based ordinal falls in one of
    ``ranges``, and the ``last`` steps, whole steps while they hold at most ``budget`` instances in their
    process (``None``: no budget). So one pass gives the timeline, whatever the run's length or its steps'.
    """

    def __init__(self, limit: Optional[int] = None, ranges: Sequence[Tuple[int, int]] = (), last: int = 0,
                 budget: Optional[int] = None) -> None:
        self.limit = limit
        self.ranges = tuple(ranges)
        self.last = last
        self.budget = budget
        self.kept = 0
        self.overflowed = limit == 0

    def all_of(self, count: int) -> bool:
        """Whether these ``count`` instances are kept, all of them (the run is still under the limit)."""
        if self.overflowed:
            return False
        self.kept += count
        self.overflowed = self.limit is not None and self.kept > self.limit
        return not self.overflowed

    def window(self) -> "Window":
        return Window(self.ranges, self.last, self.budget)


class Window:
    """One process's window of steps, found as its steps end: the instances overlapping it, kept.

    Steps are counted in the order they end (block by block, by start within a block: for the steps of one
    thread, the order they began). Instances wait as candidates until no step they could overlap can
    still come into the window: older than the first of the ``last`` latest steps, they are kept if
    they overlap a step of ``ranges``, else dropped.

    With a ``budget``, the window holds whole steps in the order their instances are decided (about the
    order they ran) while the instances kept number under it: the first step is always held, and a step
    is held or not as a whole (each instance goes with the last window step starting before it ends), so
    a run of a few huge steps (thousands of operators each, as LBFGS makes) keeps a bounded timeline.
    """

    def __init__(self, ranges: Tuple[Tuple[int, int], ...], last: int, budget: Optional[int] = None) -> None:
        self.ranges, self.last, self.budget = ranges, last, budget
        self.count = 0
        self.chosen: List[Tuple[int, int, int]] = []  # steps in ``ranges``: start, end, ordinal
        self.latest: Deque[Tuple[int, int, int]] = deque(maxlen=max(last, 1))
        self.candidates: List[Intervals] = []
        self.selected: List[Intervals] = []
        self.taken = 0
        #: per window step (by its start): whether it is held (decided when its first instance is)
        self.held: Dict[int, bool] = {}

    def steps(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Steps that ended (in start order)."""
        for start, end in zip(starts.tolist(), ends.tolist()):
            self.count += 1
            if any(first <= self.count <= last for first, last in self.ranges):
                self.chosen.append((start, end, self.count))
            self.latest.append((start, end, self.count))

    def offer(self, instances: Intervals) -> None:
        """Instances that ended; decides on those it can."""
        if len(instances):
            self.candidates.append(instances)
        if not self.latest or (self.last and len(self.latest) < self.last):
            return  # any candidate may still be among the last steps
        cutoff = self.latest[0][0] if self.last else self.latest[-1][0]
        waiting = []
        for part in self.candidates:
            old = part.end < cutoff
            if old.any():
                self._select(part.take(old), self.chosen)
                part = part.take(~old) if not old.all() else None
            if part is not None:
                waiting.append(part)
        self.candidates = waiting

    def finish(self) -> Intervals:
        """The instances kept, now that the last steps are known."""
        steps = self._steps()
        if self.budget is not None:
            self._decide_by_preference(steps)
        for part in self.candidates:
            self._select(part, steps)
        self.candidates = []
        return Intervals.concat(self.selected)

    def spans(self) -> Tuple[np.ndarray, np.ndarray]:
        """The window's steps held so far, merged (all of them once the process's records are read)."""
        held = [(start, end) for start, end, _ordinal in self._steps() if self._holds(start)]
        return merged([start for start, _ in held], [end for _, end in held])

    def ordinals(self) -> List[int]:
        """The 1-based ordinals of the steps the window holds, in order."""
        return sorted(ordinal for start, _end, ordinal in self._steps() if self._holds(start))

    def _holds(self, start: int) -> bool:
        """Whether the window step starting at ``start`` is held; one no instance went with, while the budget
        lasts."""
        decided = self.held.get(start)
        return decided if decided is not None else self.budget is None or self.taken < self.budget

    def _steps(self) -> List[Tuple[int, int, int]]:
        """Every step of the window: those of ``ranges`` and the latest, once each."""
        return sorted(set(self.chosen) | (set(self.latest) if self.last else set()))

    def _select(self, part: Intervals, steps: List[Tuple[int, int, int]]) -> None:
        spans = merged([start for start, _, _ in steps], [end for _, end, _ in steps])
        inside = overlapping(spans, part.start, part.end)
        if not inside.any():
            return
        part = part.take(inside)
        if self.budget is not None:
            part = part.take(self._admitted(part, np.array(sorted(start for start, _, _ in steps), np.int64)))
        if len(part):
            self.selected.append(part)

    def _decide_by_preference(self, steps: List[Tuple[int, int, int]]) -> None:
        """Decides on the steps still waiting, knowing each one's instances: those of ``ranges`` first (past
        warm-up), then the latest, each in order. A run of a few steps waits whole until here."""
        spans = merged([start for start, _, _ in steps], [end for _, end, _ in steps])
        starts = np.array(sorted(start for start, _, _ in steps), np.int64)
        waiting: Dict[int, int] = {}
        for part in self.candidates:
            inside = overlapping(spans, part.start, part.end)
            keys, counts = np.unique(self._owner(part.end[inside], starts), return_counts=True)
            for key, count in zip(keys.tolist(), counts.tolist()):
                waiting[key] = waiting.get(key, 0) + count
        taken = self.taken
        named = [(start, ordinal) for start, _end, ordinal in steps
                 if any(first <= ordinal <= last for first, last in self.ranges)]
        for start, _ordinal in sorted(named, key=lambda s: s[1]) + [(s, o) for s, _e, o in steps]:
            if start in waiting and start not in self.held:
                self.held[start] = taken < self.budget or not any(self.held.values())
                taken += waiting[start] if self.held[start] else 0

    @staticmethod
    def _owner(ends: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The window step each instance goes with (by its start): the last one starting before the instance
        ends."""
        return starts[np.maximum(np.searchsorted(starts, ends, side="right") - 1, 0)]

    def _admitted(self, part: Intervals, starts: np.ndarray) -> np.ndarray:
        """Which of ``part`` (instances overlapping window steps starting at ``starts``) go with a held step,
        deciding on each step when its first instances come."""
        owner = self._owner(part.end, starts)
        keys, counts = np.unique(owner, return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            if key not in self.held:
                self.held[key] = self.taken < self.budget or not any(self.held.values())
            if self.held[key]:
                self.taken += count
        held = np.array([key for key, kept in self.held.items() if kept], np.int64)
        return np.isin(owner, held)
