"""Every task instance of a run, paired and counted in one streaming pass: exact statistics at any length.

Input: the blocks of :func:`~instrumenter.builtin.trace.tracefile.scan_trace_file`.
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
from typing import Dict, Iterable, List, Sequence, Set, Tuple, Union

import numpy as np

from ...collector import formats
from ..trace import pairing
from .intervals import Intervals, Keep, overlapping
from ..trace.scan import Scan
from ..trace.tracefile import KIND_BEGIN, KIND_DETACH, KIND_LIMIT, KIND_PAUSE, KIND_RESUME, ProcessTrace

#: Histogram buckets: a duration ``d`` >= 1 ns falls in bucket ``floor(log(d) / log(RATIO)) + 1``, 0 ns in
#: bucket 0. A percentile is reported as its bucket's middle, so within ``(RATIO - 1) / (RATIO + 1)`` of the
#: exact value (and clamped to the task's min and max). The collector counts past the trace limit in the same
#: buckets (both from instrumenter/collector/formats.py).
RATIO = formats.HIST_RATIO
PERCENTILE_ERROR = (RATIO - 1) / (RATIO + 1)
#: Domains whose tasks are a library's, oneDNN's primitives: the implementation of the operator that calls
#: them, so counted in its self time with library (``self_library_ns``).
LIBRARY_DOMAINS = ("dnnl::",)
#: Enough buckets for any 64-bit duration.
BUCKETS = formats.HIST_BUCKETS
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
    self_library_ns: np.ndarray  # self time with the library's child tasks (oneDNN primitives) counted in
    min_ns: np.ndarray
    max_ns: np.ndarray
    histogram: np.ndarray     # groups x BUCKETS
    kept: Intervals
    #: whether ``kept`` holds every instance (else the own domains' only, and ``window`` the others it keeps)
    kept_everything: bool
    #: the instances outside the own domains that overlap the window of steps (:class:`~.intervals.Window`),
    #: the window's steps per pid (merged spans), and the most steps a process ran
    window: Intervals
    window_spans: Dict[int, Tuple[np.ndarray, np.ndarray]]
    window_steps: int
    #: the time threads spent inside tasks, summed over threads: the sum of outermost instances
    thread_time_ns: int
    #: tasks still open at their thread's end, on the program's own threads: each process's main thread and
    #: those that ran a task of the own domains (a framework's thread, gloo's running a collective, is not)
    unfinished: int
    processes: int
    events: int
    threads: int
    collected_ns: int
    warnings: List[str] = field(default_factory=list)
    #: a file reached its trace limit: ``kept`` stops there, the statistics do not
    limited: bool = False
    #: per pid, its collection windows (resume to pause), monotonic ns
    windows: Dict[int, List[Tuple[int, int]]] = field(default_factory=dict)
    #: the steps the window holds (1-based ordinals) in the process that ran the most steps
    window_held: List[int] = field(default_factory=list)

    def held(self, chosen: np.ndarray) -> np.ndarray:
        """Which of ``chosen`` (instances of the own domains: indices into ``kept``) had the tasks among them
        kept: all of them where ``kept`` holds every instance, else those in the window of their process."""
        inside = np.zeros(len(chosen), np.bool_)
        if self.kept_everything:
            inside[:] = True
            return inside
        for pid, spans in self.window_spans.items():
            mine = self.kept.pid[chosen] == pid
            inside[mine] = overlapping(spans, self.kept.start[chosen[mine]], self.kept.end[chosen[mine]])
        return inside

    def holding_tasks(self) -> Intervals:
        """The instances kept: ``kept`` where it holds every one, else ``kept`` and ``window`` (``kept`` first,
        so indices into ``kept`` stay valid)."""
        return self.kept if self.kept_everything else Intervals.concat([self.kept, self.window])

    def holding(self, chosen: np.ndarray) -> Tuple[Intervals, np.ndarray]:
        """The instances among which the tasks of ``chosen`` are (:meth:`holding_tasks`), and which of
        ``chosen`` had them kept (:meth:`held`)."""
        if self.kept_everything:
            return self.kept, chosen
        return self.holding_tasks(), chosen[self.held(chosen)]

    def percentile_ns(self, groups: Union[int, Sequence[int]], q: float) -> float:
        """The ``q`` quantile (0..1) of the durations of a group (or of several together), within
        :data:`PERCENTILE_ERROR`."""
        groups = [groups] if isinstance(groups, int) else list(groups)
        counts = self.histogram[groups].sum(axis=0)
        total = int(counts.sum())
        if total == 0:
            return 0.0
        rank = q * (total - 1)
        bucket = int(np.searchsorted(np.cumsum(counts), rank, side="right"))
        value = 0.0 if bucket == 0 else RATIO ** (bucket - 1) * (1 + RATIO) / 2
        return float(min(max(value, self.min_ns[groups].min()), self.max_ns[groups].max()))


class _Process:
    """One process's pass: its pointer pairs (domain, string handle) numbered locally, their statistics, the
    instances kept (with local numbers)."""

    def __init__(self, trace: ProcessTrace, own_domains: Set[str], step_labels: Set[str], keep: Keep) -> None:
        self.trace = trace
        self.own_domains = own_domains
        self.step_labels = step_labels
        self.keep = keep
        self.window = keep.window() if keep.ranges or keep.last else None
        self.ids: Dict[Tuple[int, int], int] = {}
        self.pointers: List[Tuple[int, int]] = []
        self._lookup = (np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint64))
        self.own: List[bool] = []  # per local id, from the names known when it was first seen
        self.step: List[bool] = []  # per local id: an own step label
        size = 64
        self.count = np.zeros(size, np.int64)
        self.sum_ns = np.zeros(size, np.int64)
        self.inside_ns = np.zeros(size, np.int64)
        self.self_ns = np.zeros(size, np.int64)
        self.min_ns = np.full(size, np.iinfo(np.int64).max, np.int64)
        self.max_ns = np.zeros(size, np.int64)
        self.self_library_ns = np.zeros(size, np.int64)
        self.library = np.zeros(size, np.uint8)  # per local id: a library's task (oneDNN), by its domain
        self.histogram = np.zeros((size, BUCKETS), np.int64)
        self.threads: Dict[int, pairing.Thread] = {}
        self.last_ts: Dict[int, int] = {}
        self.kept: Dict[int, List[Intervals]] = {}  # per thread, in the order they began (unfinished last)
        self.thread_time_ns = 0
        self.unfinished = 0  # on the program's own threads (set by finish)
        self.open_at_end: Dict[int, int] = {}  # per thread, its tasks still open at its end
        self.own_threads: Set[int] = {trace.pid}  # the main thread, and every thread with an own task
        self.counted_events = 0  # past the trace limit: the begins and ends the collector counted
        self.max_ts = trace.start_ns

    # -- numbering -------------------------------------------------------------------------------------
    def _local_ids(self, domains: np.ndarray, strings: np.ndarray) -> np.ndarray:
        """The local id of each (domain, string handle) pair: looked up among the string handles seen."""
        if len(strings) == 0:
            return np.zeros(0, np.int64)
        for _ in range(2):
            keys, numbers, paired = self._lookup
            at = np.minimum(np.searchsorted(keys, strings), max(len(keys) - 1, 0))
            found = keys[at] == strings if len(keys) else np.zeros(len(strings), np.bool_)
            if found.all():
                if np.array_equal(paired[at], domains):  # the usual case: one domain per string handle
                    return numbers[at]
                break
            missing = np.flatnonzero(~found)
            _new, first = np.unique(strings[missing], return_index=True)
            for domain, string in zip(domains[missing[first]].tolist(), strings[missing[first]].tolist()):
                self._number((domain, string))
            self._lookup = self._table()
        pairs = np.stack([domains, strings], axis=1)
        unique_pairs, inverse = np.unique(pairs, axis=0, return_inverse=True)
        lut = np.array([self._number((int(a), int(b))) for a, b in unique_pairs.tolist()], np.int64)
        return lut[inverse.reshape(-1)]

    def _table(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """String handles seen, sorted, with the local id and domain of their first pair."""
        first: Dict[int, Tuple[int, int]] = {}
        for number, (domain, string) in enumerate(self.pointers):
            first.setdefault(string, (number, domain))
        keys = np.array(sorted(first), np.uint64)
        return (keys, np.array([first[k][0] for k in keys.tolist()], np.int64),
                np.array([first[k][1] for k in keys.tolist()], np.uint64))

    def _number(self, pair: Tuple[int, int]) -> int:
        number = self.ids.get(pair)
        if number is None:
            number = self.ids[pair] = len(self.pointers)
            self.pointers.append(pair)
            name = self.trace.domains.get(pair[0])
            self.own.append(name is None or name in self.own_domains)  # unnamed yet: kept until known
            self.step.append(name in self.own_domains and self.trace.strings.get(pair[1]) in self.step_labels)
            if number >= len(self.count):
                self._grow()
            self.library[number] = bool(name and name.startswith(LIBRARY_DOMAINS))
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
        self.self_library_ns, self.library = grown(self.self_library_ns, 0), grown(self.library, 0)
        self.histogram = grown(self.histogram, 0)

    # -- pairing ---------------------------------------------------------------------------------------
    def add(self, tid: int, records: np.ndarray) -> None:
        """One thread's begin and end records of one block, in program order."""
        begin = records["kind"] == KIND_BEGIN
        ids = np.zeros(len(records), np.int64)
        ids[begin] = self._local_ids(records["a"][begin], records["b"][begin])
        self.last_ts[tid] = int(records["ts"][-1])
        self.max_ts = max(self.max_ts, self.last_ts[tid])
        if tid not in self.own_threads and np.array(self.own, np.bool_)[ids[begin]].any():
            self.own_threads.add(tid)
        thread = self._thread(tid)
        rows, thread_time, unfinished = pairing.pair(thread, records, ids, self._counts())
        self.thread_time_ns += thread_time
        self._open_at_end(tid, unfinished)
        self._keep(tid, rows)

    def finish(self) -> None:
        """Adds the collector's counts past the trace limit; ends every task still open at its thread's last
        event (an unfinished instance)."""
        for stats in self.trace.stats:
            self.last_ts[stats.tid] = max(self.last_ts.get(stats.tid, 0), stats.ts)
            number = self._number((stats.domain, stats.string))
            count, total, inside, own, low, high, outer, unfinished = stats.head
            if count:
                self.count[number] += count
                self.sum_ns[number] += total
                self.inside_ns[number] += inside
                self.self_ns[number] += own
                self.self_library_ns[number] += own  # past the limit, library children are not told apart
                self.min_ns[number] = min(self.min_ns[number], low)
                self.max_ns[number] = max(self.max_ns[number], high)
                self.thread_time_ns += outer
                self._open_at_end(stats.tid, unfinished)
                if self.own[number]:
                    self.own_threads.add(stats.tid)
                self.counted_events += 2 * count
            if len(stats.buckets):
                np.add.at(self.histogram[number], stats.buckets[:, 0].astype(np.int64), stats.buckets[:, 1])
        for tid, thread in self.threads.items():
            rows, thread_time = pairing.close(thread, self.last_ts.get(tid, 0), self._counts())
            self.thread_time_ns += thread_time
            self._open_at_end(tid, len(rows[0]))
            self._keep(tid, rows)
        # A framework's own thread (gloo's, running a collective; an OpenMP worker) may be inside one of its
        # operators when the process exits: that is not the program's markers left open.
        self.unfinished = sum(n for tid, n in self.open_at_end.items() if tid in self.own_threads)

    def _open_at_end(self, tid: int, count: int) -> None:
        if count:
            self.open_at_end[tid] = self.open_at_end.get(tid, 0) + count

    def _thread(self, tid: int) -> pairing.Thread:
        thread = self.threads.get(tid)
        if thread is None:
            thread = self.threads[tid] = pairing.Thread(len(self.count))
        thread.fit(len(self.count))
        return thread

    def _counts(self) -> pairing.Counts:
        return pairing.Counts(self.count, self.sum_ns, self.inside_ns, self.self_ns, self.min_ns, self.max_ns,
                              self.histogram, self.self_library_ns, self.library, _LOG_RATIO)

    def _keep(self, tid: int, rows: pairing.Rows) -> None:
        """The closed instances kept (in the order they began): the own domains' always; the others while
        the run is under the keep limit, and those of the window of steps."""
        ids, starts, ends, _selfs, _depths, _outermost, finished = rows
        if not len(ids):
            return
        order = np.argsort(starts, kind="stable")  # rows come in the order tasks closed
        ids, starts, ends, finished = ids[order], starts[order], ends[order], finished[order]
        everything = self.keep.all_of(len(ids))
        own = np.array(self.own, np.bool_)[ids]
        if self.window is not None:
            steps = np.array(self.step, np.bool_)[ids]
            if steps.any():
                self.window.steps(starts[steps], ends[steps])
            others = np.flatnonzero(~own)
            self.window.offer(Intervals.of(self.trace.pid, tid, ids[others], starts[others], ends[others],
                                           finished[others]))
        keep = slice(None) if everything else np.flatnonzero(own)
        if len(ids[keep]):
            self.kept.setdefault(tid, []).append(Intervals.of(
                self.trace.pid, tid, ids[keep], starts[keep], ends[keep], finished[keep]))

    def names(self) -> List[Tuple[str, str]]:
        """Each local id's (domain, name), now that the whole file's names are known."""
        return [(self.trace.domain_name(a), self.trace.string_name(b)) for a, b in self.pointers]


def collection_windows(trace: ProcessTrace, last_ts: int, start_paused: bool) -> List[Tuple[int, int]]:
    """Each resume and the next pause or detach (or the process's last event), in one process."""
    windows = []
    running_since = None if start_paused else trace.start_ns
    for ts, kind, _tid in sorted(trace.controls):
        if kind == KIND_RESUME and running_since is None:
            running_since = ts
        elif kind in (KIND_PAUSE, KIND_DETACH) and running_since is not None:
            windows.append((running_since, ts))
            running_since = None
    if running_since is not None:
        windows.append((running_since, max(last_ts, max((c[0] for c in trace.controls), default=0))))
    return windows


def aggregate(scans: Iterable[Scan], own_domains: Iterable[str], keep: Keep, start_paused: bool = True,
              step_labels: Iterable[str] = ()) -> Aggregates:
    """One pass over every process's blocks (``scans``: :func:`~..trace.scan.scan_trace_dir`'s); ``step_labels``:
    the own tasks that are steps, for ``keep``'s window of steps."""
    own = set(own_domains)
    labels = set(step_labels)
    processes: List[_Process] = []
    for trace, blocks in scans:
        process = _Process(trace, own, labels, keep)
        for block in blocks:
            for tid, records in block.items():
                process.add(tid, records)
        process.finish()
        processes.append(process)
    merged = _merge(processes, keep, own)
    merged.windows = {p.trace.pid: collection_windows(p.trace, p.max_ts, start_paused) for p in processes}
    merged.collected_ns = sum(end - start for windows in merged.windows.values() for start, end in windows)
    return merged


def _merge(processes: List[_Process], keep: Keep, own_domains: Set[str]) -> Aggregates:
    groups: Dict[Tuple[str, str], int] = {}
    luts = []
    limited = False
    warnings: List[str] = []
    for process in processes:
        names = process.names()
        luts.append(np.array([groups.setdefault(name, len(groups)) for name in names], np.int64))
        warnings.extend(process.trace.warnings)
        reached = [ts for ts, kind, _tid in process.trace.controls if kind == KIND_LIMIT]
        if reached:
            limited = True
            warnings.append(f"{process.trace.path.name} reached the trace limit (--trace-limit) "
                            f"{(min(reached) - process.trace.start_ns) / 1e9:.1f} s after its start: its timeline "
                            "(trace.json, steps.svg, the ranks' step by step comparison) stops there; the task and "
                            "step statistics count the whole run (the collector counted past the limit)")
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
                  self_library_ns=np.zeros(size, np.int64),
                  min_ns=np.full(size, np.iinfo(np.int64).max, np.int64), max_ns=np.zeros(size, np.int64))
    histogram = np.zeros((size, BUCKETS), np.int64)
    kept: List[Intervals] = []
    window: List[Intervals] = []
    window_spans: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    window_steps = 0
    window_held: List[int] = []
    for process, lut in zip(processes, luts):
        used = len(process.pointers)
        for name in ("count", "sum_ns", "inside_ns", "self_ns", "self_library_ns"):
            np.add.at(merged[name], lut, getattr(process, name)[:used])
        np.minimum.at(merged["min_ns"], lut, process.min_ns[:used])
        np.maximum.at(merged["max_ns"], lut, process.max_ns[:used])
        np.add.at(histogram, lut, process.histogram[:used])
        for tid in sorted(process.kept):
            for part in process.kept[tid]:
                part.group = lut[part.group].astype(np.int32)
                kept.append(part)
        process.kept = {}
        if process.window is not None:
            part = process.window.finish()
            part.group = lut[part.group].astype(np.int32)
            window.append(part)
            window_spans[process.trace.pid] = process.window.spans()
            if process.window.count >= window_steps:
                window_steps, window_held = process.window.count, process.window.ordinals()
    names = list(groups)
    everything = not keep.overflowed
    if keep.overflowed:
        # past the limit only the own domains' are kept: drop the others kept before it (and those kept
        # because their domain had no name yet, when it turns out not to be an own one), part by part
        own_groups = np.array([domain in own_domains for domain, _name in names], np.bool_)
        kept = [part.take(own_groups[part.group]) for part in kept]
    kept_all = Intervals.concat(kept, consume=True)
    merged["min_ns"][merged["count"] == 0] = 0
    return Aggregates(
        groups=names, histogram=histogram, kept=kept_all, kept_everything=everything,
        window=Intervals.concat(window), window_spans=window_spans, window_steps=window_steps, window_held=window_held,
        thread_time_ns=sum(p.thread_time_ns for p in processes), unfinished=sum(p.unfinished for p in processes),
        processes=len(processes),
        events=sum(p.trace.event_count + p.counted_events for p in processes),
        threads=sum(len(p.trace.threads) for p in processes),
        collected_ns=0, warnings=warnings, limited=limited, **merged)

