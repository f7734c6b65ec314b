"""From recorded ITT events to what the summary shows: tasks, collected time, steps, operators.

Input is the reader's :class:`~instrumenter.builtin.tracefile.ProcessTrace`
list; :func:`intervals` pairs its begins and ends once, and everything else
(the statistics here, the Chrome trace) is computed from those intervals.
Output is the plain dataclasses of :mod:`instrumenter.summary`. Times are
seconds in the output, nanoseconds inside.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..summary import StepStats, Summary, TaskStats

#: The domain libtorch's ITT wrapper (emit_itt, range_push) records on.
TORCH_DOMAIN = "PyTorch"


@dataclass(frozen=True, slots=True)
class Interval:
    """One task instance: begun and ended on one thread of one process."""

    pid: int
    tid: int
    domain: str
    name: str
    start: int
    end: int
    depth: int
    self_ns: int
    parent: Optional[str]
    finished: bool = True

    @property
    def duration(self) -> int:
        return self.end - self.start


def intervals(traces: Iterable) -> Tuple[List[Interval], int]:
    """Pair begins and ends per thread; tasks left open end at the thread's last event."""
    result: List[Interval] = []
    unfinished = 0
    for trace in traces:
        stacks: Dict[int, List[list]] = {}
        last_ts: Dict[int, int] = {}
        for event in trace.events:
            last_ts[event.tid] = event.ts
            if event.kind == "begin":
                stacks.setdefault(event.tid, []).append([event.domain or "?", event.name or "?", event.ts, 0])
            elif event.kind == "end":
                stack = stacks.get(event.tid)
                if not stack:
                    continue  # an end whose begin was dropped (collection was paused)
                domain, name, start, child_ns = stack.pop()
                duration = event.ts - start
                parent = stack[-1][1] if stack else None
                if stack:
                    stack[-1][3] += duration
                result.append(Interval(trace.pid, event.tid, domain, name, start, event.ts, len(stack),
                                       max(duration - child_ns, 0), parent))
        for tid, stack in stacks.items():
            while stack:
                domain, name, start, child_ns = stack.pop()
                end = last_ts.get(tid, start)
                if stack:
                    stack[-1][3] += end - start
                result.append(Interval(trace.pid, tid, domain, name, start, end, len(stack),
                                       max(end - start - child_ns, 0), stack[-1][1] if stack else None, False))
                unfinished += 1
    result.sort(key=lambda i: (i.pid, i.tid, i.start))
    return result, unfinished


def collected_ns(traces: Iterable, start_paused: bool = True) -> int:
    """Time between each resume and the next pause (per process, summed)."""
    total = 0
    for trace in traces:
        running_since = None if start_paused else trace.start_ns
        last = trace.start_ns
        for event in trace.events:
            last = max(last, event.ts)
            if event.kind == "resume" and running_since is None:
                running_since = event.ts
            elif event.kind in ("pause", "detach") and running_since is not None:
                total += event.ts - running_since
                running_since = None
        if running_since is not None:
            total += last - running_since
    return total


def thread_time_ns(items: Iterable[Interval]) -> int:
    """The time threads spent inside tasks, summed over threads: what every share is of.

    A task's time lies within an outermost task of its own thread, so no share
    exceeds 100 %, however many threads run tasks at once.
    """
    return sum(item.duration for item in items if item.depth == 0)


def covered_ns(items: Iterable[Interval]) -> int:
    """The time spent inside at least one of ``items``, per thread, summed over threads.

    An instance nested in another one (recursion: a task begun again before it
    ended, on the same thread) adds nothing: that time is already inside the
    outer instance. Intervals on a thread nest (one stack pairs them), so this
    is the sum of the outermost instances; it is computed as a union anyway.
    """
    by_thread: Dict[Tuple[int, int], List[Interval]] = {}
    for item in items:
        by_thread.setdefault((item.pid, item.tid), []).append(item)
    total = 0
    for thread in by_thread.values():
        covered_until = None
        for item in sorted(thread, key=lambda i: i.start):
            start = item.start if covered_until is None else max(item.start, covered_until)
            if item.end > start:
                total += item.end - start
                covered_until = item.end
    return total


def task_stats(items: Sequence[Interval], thread_time: int) -> List[TaskStats]:
    """Per (domain, name): count, mean, min and max over every instance (begin); total and share over
    :func:`covered_ns`, so a recursive task's nested instances are not counted twice and its share stays
    within 100 % of ``thread_time``; self time is each instance's own (disjoint between instances), summed.
    """
    groups: Dict[Tuple[str, str], List[Interval]] = {}
    for item in items:
        groups.setdefault((item.domain, item.name), []).append(item)
    stats = []
    for (domain, name), group in groups.items():
        durations = [i.duration for i in group]
        total = covered_ns(group)
        stats.append(TaskStats(
            domain=domain, name=name, count=len(group), total_s=total / 1e9,
            self_s=sum(i.self_ns for i in group) / 1e9, mean_s=sum(durations) / len(group) / 1e9,
            min_s=min(durations) / 1e9, max_s=max(durations) / 1e9,
            share=(total / thread_time) if thread_time else 0.0,
        ))
    stats.sort(key=lambda s: (s.domain, -s.total_s))
    return stats


def step_stats(items: Sequence[Interval], step_labels: Iterable[str],
               domains: Optional[Iterable[str]] = None) -> List[StepStats]:
    """Per step label, on autoitt's own domains (``None``: any domain)."""
    wanted = None if domains is None else set(domains)
    result = []
    for label in step_labels:
        durations = [i.duration / 1e9 for i in items
                     if i.name == label and (wanted is None or i.domain in wanted) and i.finished]
        if not durations:
            continue
        ordered = sorted(durations)
        p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
        rest = durations[1:]
        result.append(StepStats(
            label=label, count=len(durations), mean_s=statistics.fmean(durations),
            median_s=statistics.median(durations), p95_s=p95, first_s=durations[0],
            steady_mean_s=statistics.fmean(rest) if rest else durations[0], durations_s=tuple(durations),
        ))
    return result


def summarize(traces: Sequence, items: Sequence[Interval], unfinished: int, elapsed_s: float,
              step_labels: Iterable[str], domains: Optional[Iterable[str]], start_paused: bool = True,
              top: int = 15) -> Summary:
    """The summary of a run from its traces and their :func:`intervals` (``items``, ``unfinished``)."""
    collected = collected_ns(traces, start_paused)
    thread_time = thread_time_ns(items)
    stats = task_stats(items, thread_time)
    operators = sorted((s for s in stats if s.domain == TORCH_DOMAIN and s.name.startswith(("aten::", "autograd::"))),
                       key=lambda s: -s.self_s)[:top]
    warnings = [w for trace in traces for w in trace.warnings]
    if unfinished:
        warnings.append(f"{unfinished} task(s) never ended (the run stopped inside them); they end at the last event")
    return Summary(
        elapsed_s=elapsed_s,
        collected_s=collected / 1e9,
        thread_time_s=thread_time / 1e9,
        processes=len(traces),
        threads=len({(t.pid, e.tid) for t in traces for e in t.events}),
        events=sum(len(t.events) for t in traces),
        tasks=stats,
        steps=step_stats(items, step_labels, domains),
        operators=operators,
        unfinished=unfinished,
        warnings=warnings,
    )
