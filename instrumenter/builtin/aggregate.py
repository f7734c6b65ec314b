"""Every task instance of a run, paired and counted in one streaming pass: exact statistics at any length.

Input: the blocks of :func:`~instrumenter.builtin.tracefile.scan_trace_file`.
Per thread a stack of open tasks, carried from block to block, pairs each
end with the latest open begin (an end with none open is dropped: its begin
fell in a pause); a task still open when its thread's records stop ends at
the thread's last event, as *unfinished*. Each block is paired with numpy, so
the cost per event is a few array operations, whatever the run's length, and
the memory is one block's worth plus what is kept.

Output, :class:`Aggregates`:

* per task (domain, name), over the whole run: count, summed duration, time
  inside (a task nested in itself on a thread counted once), self time (inside
  the task but in none of its child tasks), min, max, and a histogram of
  durations with buckets :data:`RATIO` wide, for percentiles within
  :data:`PERCENTILE_ERROR` of the exact value;
* the instances kept (:class:`Intervals`): every one of the run's own domains
  (loops, epochs, steps, evals: few) and, of the others, what a
  :class:`Keep` policy says (all of them up to a limit, or those overlapping
  a window of steps: :mod:`.timeline`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from .intervals import Intervals, overlapping
from .tracefile import KIND_BEGIN, KIND_DETACH, KIND_PAUSE, KIND_RESUME, ProcessTrace, Scan

#: Histogram buckets: a duration ``d`` >= 1 ns falls in bucket ``floor(log(d) / log(RATIO)) + 1``, 0 ns in
#: bucket 0. A percentile is reported as its bucket's middle, so within ``(RATIO - 1) / (RATIO + 1)`` of the
#: exact value (and clamped to the task's min and max).
RATIO = 1.02
PERCENTILE_ERROR = (RATIO - 1) / (RATIO + 1)
#: Enough buckets for any 64-bit duration.
BUCKETS = int(math.log(2.0 ** 64) / math.log(RATIO)) + 2
_LOG_RATIO = math.log(RATIO)


@dataclass
class Aggregates:
    """What one pass over a run's traces gives: per-task statistics (arrays indexed like ``groups``), the
    instances kept, and the run's totals."""

    groups: List[Tuple[str, str]]  # (domain, name)
    count: np.ndarray
    sum_ns: np.ndarray        # of every instance's duration
    inside_ns: np.ndarray     # time inside at least one instance, per thread, summed
    self_ns: np.ndarray
    min_ns: np.ndarray
    max_ns: np.ndarray
    histogram: np.ndarray     # groups x BUCKETS
    kept: Intervals
    #: whether ``kept`` holds every instance (not only the own domains' and a window's)
    kept_everything: bool
    #: the time threads spent inside tasks, summed over threads: the sum of outermost instances
    thread_time_ns: int
    unfinished: int
    processes: int
    events: int
    threads: int
    collected_ns: int
    warnings: List[str] = field(default_factory=list)

    def percentile_ns(self, group: int, q: float) -> float:
        """The ``q`` quantile (0..1) of the group's durations, within :data:`PERCENTILE_ERROR`."""
        counts = self.histogram[group]
        total = int(self.count[group])
        if total == 0:
            return 0.0
        rank = q * (total - 1)
        bucket = int(np.searchsorted(np.cumsum(counts), rank, side="right"))
        value = 0.0 if bucket == 0 else RATIO ** (bucket - 1) * (1 + RATIO) / 2
        return float(min(max(value, self.min_ns[group]), self.max_ns[group]))


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


class _Open:
    """A thread's open tasks, bottom to top: local id, start, child time so far."""

    __slots__ = ("ids", "starts", "child")

    def __init__(self) -> None:
        self.ids: List[int] = []
        self.starts: List[int] = []
        self.child: List[int] = []


class _Process:
    """One process's pass: its pointer pairs (domain, string handle) numbered locally, their statistics, the
    instances kept (with local numbers)."""

    def __init__(self, trace: ProcessTrace, own_domains: Set[str], keep: Keep, statistics: bool) -> None:
        self.trace = trace
        self.own_domains = own_domains
        self.keep = keep
        self.statistics = statistics
        self.ids: Dict[Tuple[int, int], int] = {}
        self.pointers: List[Tuple[int, int]] = []
        self.own: List[bool] = []  # per local id, from the names known when it was first seen
        size = 64
        self.count = np.zeros(size, np.int64)
        self.sum_ns = np.zeros(size, np.int64)
        self.inside_ns = np.zeros(size, np.int64)
        self.self_ns = np.zeros(size, np.int64)
        self.min_ns = np.full(size, np.iinfo(np.int64).max, np.int64)
        self.max_ns = np.zeros(size, np.int64)
        self.histogram = np.zeros((size, BUCKETS), np.int64) if statistics else None
        self.open: Dict[int, _Open] = {}
        self.last_ts: Dict[int, int] = {}
        self.kept: Dict[int, List[Intervals]] = {}  # per thread, in the order they began (unfinished last)
        self.thread_time_ns = 0
        self.unfinished = 0
        self.max_ts = trace.start_ns

    # -- numbering -------------------------------------------------------------------------------------
    def _local_ids(self, domains: np.ndarray, strings: np.ndarray) -> np.ndarray:
        if len(strings) == 0:
            return np.zeros(0, np.int64)
        unique_strings, inverse = np.unique(strings, return_inverse=True)
        seen_at = np.zeros(len(unique_strings), np.int64)
        seen_at[inverse] = np.arange(len(strings))  # one place each string handle is used
        paired_domain = domains[seen_at]
        if np.array_equal(domains, paired_domain[inverse]):  # the usual case: one domain per string handle
            pairs = zip(paired_domain.tolist(), unique_strings.tolist())
            lut = np.array([self._number(pair) for pair in pairs], np.int64)
            return lut[inverse]
        keys = np.stack([domains, strings], axis=1)
        unique_pairs, inverse = np.unique(keys, axis=0, return_inverse=True)
        lut = np.array([self._number((int(a), int(b))) for a, b in unique_pairs.tolist()], np.int64)
        return lut[inverse.reshape(-1)]

    def _number(self, pair: Tuple[int, int]) -> int:
        number = self.ids.get(pair)
        if number is None:
            number = self.ids[pair] = len(self.pointers)
            self.pointers.append(pair)
            name = self.trace.domains.get(pair[0])
            self.own.append(name is None or name in self.own_domains)  # unnamed yet: kept until known
            if number >= len(self.count):
                self._grow()
        return number

    def _grow(self) -> None:
        size = 2 * len(self.count)

        def grown(array: np.ndarray, fill: int) -> np.ndarray:
            bigger = np.full((size,) + array.shape[1:], fill, array.dtype)
            bigger[:len(array)] = array
            return bigger

        self.count, self.sum_ns = grown(self.count, 0), grown(self.sum_ns, 0)
        self.inside_ns, self.self_ns = grown(self.inside_ns, 0), grown(self.self_ns, 0)
        self.min_ns, self.max_ns = grown(self.min_ns, np.iinfo(np.int64).max), grown(self.max_ns, 0)
        if self.histogram is not None:
            self.histogram = grown(self.histogram, 0)

    # -- pairing ---------------------------------------------------------------------------------------
    def add(self, tid: int, records: np.ndarray) -> None:
        """One thread's begin and end records of one block, in program order."""
        ts = records["ts"].astype(np.int64)
        begin = records["kind"] == KIND_BEGIN
        ids = np.full(len(records), -1, np.int64)
        ids[begin] = self._local_ids(records["a"][begin], records["b"][begin])
        self.last_ts[tid] = int(ts[-1])
        self.max_ts = max(self.max_ts, int(ts.max()))
        carried = self.open.get(tid) or _Open()
        closed, still_open = _pair(begin, ts, ids, carried)
        self.open[tid] = still_open
        self._record(tid, *closed, finished=True)

    def finish(self) -> None:
        """Ends every task still open at its thread's last event (an unfinished instance)."""
        for tid, stack in self.open.items():
            end = self.last_ts.get(tid, 0)
            ids, starts, selfs, depths, inside = [], [], [], [], []
            child_of_next = 0
            for depth in range(len(stack.ids) - 1, -1, -1):
                start = stack.starts[depth]
                duration = max(end - start, 0)
                ids.append(stack.ids[depth])
                starts.append(start)
                selfs.append(max(duration - stack.child[depth] - child_of_next, 0))
                depths.append(depth)
                inside.append(stack.ids[depth] not in stack.ids[:depth])
                child_of_next = duration
            if ids:
                self.unfinished += len(ids)
                n = len(ids)
                self._record(tid, np.array(ids, np.int64), np.array(starts, np.int64), np.full(n, end, np.int64),
                             np.array(selfs, np.int64), np.array(depths, np.int64), np.array(inside, np.bool_),
                             finished=False)
        self.open = {}

    def _record(self, tid: int, ids: np.ndarray, starts: np.ndarray, ends: np.ndarray, selfs: np.ndarray,
                depths: np.ndarray, outermost: np.ndarray, finished: bool) -> None:
        if not len(ids):
            return
        durations = ends - starts
        self.thread_time_ns += int(durations[depths == 0].sum())
        if self.statistics:
            np.add.at(self.count, ids, 1)
            np.add.at(self.sum_ns, ids, durations)
            np.add.at(self.inside_ns, ids, np.where(outermost, durations, 0))
            np.add.at(self.self_ns, ids, selfs)
            np.minimum.at(self.min_ns, ids, durations)
            np.maximum.at(self.max_ns, ids, durations)
            buckets = np.zeros(len(durations), np.int64)
            positive = durations > 0
            buckets[positive] = (np.log(durations[positive]) / _LOG_RATIO).astype(np.int64) + 1
            np.add.at(self.histogram, (ids, buckets), 1)
        others = self.keep.others(self.trace.pid, starts, ends)
        keep = np.ones(len(ids), np.bool_) if others is None else np.array(self.own, np.bool_)[ids] | others
        if keep.any():
            n = int(keep.sum())
            self.kept.setdefault(tid, []).append(Intervals(np.full(n, self.trace.pid, np.int64), np.full(n, tid, np.int64), ids[keep],
                                       starts[keep], ends[keep], selfs[keep], depths[keep],
                                       np.full(n, finished, np.bool_)))

    def names(self) -> List[Tuple[str, str]]:
        """Each local id's (domain, name), now that the whole file's names are known."""
        return [(self.trace.domain_name(a), self.trace.string_name(b)) for a, b in self.pointers]


def _pair(begin: np.ndarray, ts: np.ndarray, ids: np.ndarray, carried: _Open):
    """Pairs one thread's records (``begin``: which are begins) after the tasks ``carried`` open.

    Returns the closed instances (local ids, starts, ends, self times, depths, outermost-of-their-task) and
    the tasks left open. Levels: a begin opens the level of the depth it makes; an end closes the level it
    leaves. Sorted by level (stably), each level reads begin, end, begin, end, ... with at most one open
    begin last: so consecutive begin-end pairs of a level are the instances.
    """
    n0 = len(carried.ids)
    is_begin = np.concatenate([np.ones(n0, np.bool_), begin])
    times = np.concatenate([np.array(carried.starts, np.int64), ts])
    local = np.concatenate([np.array(carried.ids, np.int64), ids])
    n = len(times)
    steps = np.where(is_begin, 1, -1)
    depth = np.cumsum(steps)
    floor = np.minimum(np.minimum.accumulate(depth), 0)
    dropped = np.zeros(n, np.bool_)
    dropped[1:] = floor[1:] < floor[:-1]
    dropped[0] = floor[0] < 0
    depth = depth - floor  # an end with no open task is dropped: the depth stays at 0
    level = np.where(is_begin, depth, depth + 1)
    position = np.flatnonzero(~dropped)
    order = position[np.argsort(level[position], kind="stable")]
    sorted_level = level[order]
    sorted_begin = is_begin[order]
    closes = np.zeros(len(order), np.bool_)
    closes[:-1] = sorted_begin[:-1] & ~sorted_begin[1:] & (sorted_level[:-1] == sorted_level[1:])

    # every begin (closed or open), ordered by (level, position): its parent is the begin one level up
    # that comes last before it
    begins = np.flatnonzero(sorted_begin)
    begin_pos = order[begins]
    begin_level = sorted_level[begins]
    begin_closed = closes[begins]
    begin_end = np.zeros(len(begins), np.int64)
    begin_end[begin_closed] = times[order[begins[begin_closed] + 1]]
    key = begin_level * (n + 1) + begin_pos
    parent = np.searchsorted(key, (begin_level - 1) * (n + 1) + begin_pos) - 1
    parent[begin_level == 1] = -1
    begin_ids = local[begin_pos]
    begin_start = times[begin_pos]
    duration = np.where(begin_closed, begin_end - begin_start, 0)

    child = np.zeros(len(begins), np.int64)
    with_parent = begin_closed & (parent >= 0)
    np.add.at(child, parent[with_parent], duration[with_parent])
    if n0:
        carried_rank = np.searchsorted(key, np.arange(1, n0 + 1) * (n + 1) + np.arange(n0))
        child[carried_rank] += np.array(carried.child, np.int64)

    outermost = np.ones(len(begins), np.bool_)
    ancestor = parent.copy()
    while True:
        live = np.flatnonzero(ancestor >= 0)
        if not len(live):
            break
        outermost[live] &= begin_ids[ancestor[live]] != begin_ids[live]
        ancestor[live] = parent[ancestor[live]]

    closed = np.flatnonzero(begin_closed)
    closed = closed[np.argsort(begin_pos[closed], kind="stable")]  # in the order they began
    result = (begin_ids[closed], begin_start[closed], begin_end[closed],
              np.maximum(duration[closed] - child[closed], 0), begin_level[closed] - 1, outermost[closed])
    still = _Open()
    open_ranks = np.flatnonzero(~begin_closed)  # one per level, by level: the stack, bottom to top
    still.ids = begin_ids[open_ranks].tolist()
    still.starts = begin_start[open_ranks].tolist()
    still.child = child[open_ranks].tolist()
    return result, still


def collected_ns(trace: ProcessTrace, last_ts: int, start_paused: bool) -> int:
    """Time between each resume and the next pause or detach, in one process."""
    total = 0
    running_since = None if start_paused else trace.start_ns
    for ts, kind, _tid in sorted(trace.controls):
        if kind == KIND_RESUME and running_since is None:
            running_since = ts
        elif kind in (KIND_PAUSE, KIND_DETACH) and running_since is not None:
            total += ts - running_since
            running_since = None
    if running_since is not None:
        total += max(last_ts, max((c[0] for c in trace.controls), default=0)) - running_since
    return total


def aggregate(scans: Iterable[Scan], own_domains: Iterable[str], keep: Keep, start_paused: bool = True,
              statistics: bool = True) -> Aggregates:
    """One pass over every process's blocks (``scans``: :func:`~.tracefile.scan_trace_dir`'s).

    ``statistics=False`` only pairs and keeps (a second pass for a window of the timeline).
    """
    own = set(own_domains)
    processes: List[_Process] = []
    for trace, blocks in scans:
        process = _Process(trace, own, keep, statistics)
        for block in blocks:
            for tid, records in block.items():
                process.add(tid, records)
        process.finish()
        processes.append(process)
    merged = _merge(processes, keep)
    merged.collected_ns = sum(collected_ns(p.trace, p.max_ts, start_paused) for p in processes)
    return merged


def _merge(processes: List[_Process], keep: Keep) -> Aggregates:
    groups: Dict[Tuple[str, str], int] = {}
    luts = []
    warnings: List[str] = []
    for process in processes:
        names = process.names()
        luts.append(np.array([groups.setdefault(name, len(groups)) for name in names], np.int64))
        warnings.extend(process.trace.warnings)
        missing: Dict[str, int] = {}
        for (a, b), count in zip(process.pointers, process.count.tolist()):
            for pointer, table, what in ((a, process.trace.domains, "domain"), (b, process.trace.strings, "string")):
                if pointer and pointer not in table:
                    label = f"<{what} {pointer:#x}>"
                    missing[label] = missing.get(label, 0) + count
        warnings.extend(f"{process.trace.path.name}: {n} events use {label}, which has no name record"
                        for label, n in sorted(missing.items()))
    size = len(groups)
    merged = dict(count=np.zeros(size, np.int64), sum_ns=np.zeros(size, np.int64),
                  inside_ns=np.zeros(size, np.int64), self_ns=np.zeros(size, np.int64),
                  min_ns=np.full(size, np.iinfo(np.int64).max, np.int64), max_ns=np.zeros(size, np.int64))
    histogram = np.zeros((size, BUCKETS), np.int64)
    kept = []
    for process, lut in zip(processes, luts):
        used = len(process.pointers)
        for name in ("count", "sum_ns", "inside_ns", "self_ns"):
            np.add.at(merged[name], lut, getattr(process, name)[:used])
        np.minimum.at(merged["min_ns"], lut, process.min_ns[:used])
        np.maximum.at(merged["max_ns"], lut, process.max_ns[:used])
        if process.histogram is not None:
            np.add.at(histogram, lut, process.histogram[:used])
        for tid in sorted(process.kept):
            for part in process.kept[tid]:
                part.group = lut[part.group]
                kept.append(part)
    names = list(groups)
    kept_all = Intervals.concat(kept)
    everything = keep.spans is None and not keep.overflowed
    if keep.spans is None and keep.overflowed and len(kept_all):
        # past the limit only the own domains' are kept: drop the others kept before it (and those kept
        # because their domain had no name yet, when it turns out not to be an own one)
        own_domains = processes[0].own_domains
        own_groups = np.array([domain in own_domains for domain, _name in names], np.bool_)
        kept_all = kept_all.take(own_groups[kept_all.group])
    merged["min_ns"][merged["count"] == 0] = 0
    return Aggregates(
        groups=names, histogram=histogram, kept=kept_all, kept_everything=everything,
        thread_time_ns=sum(p.thread_time_ns for p in processes), unfinished=sum(p.unfinished for p in processes),
        processes=len(processes),
        events=sum(p.trace.event_count for p in processes), threads=sum(len(p.trace.threads) for p in processes),
        collected_ns=0, warnings=warnings, **merged)

