"""``trace.json`` in Chrome's trace event format (ui.perfetto.dev, chrome://tracing).

One track per thread, named; processes labelled (the script, its workers; in
a multi-process run, :func:`~instrumenter.builtin.ranks.ranked`, "rank N",
with a rank's workers next to it);
tasks as complete (``X``) events with their ITT domain as category; resume
and pause as instant events. Timestamps are microseconds from the first
process's start.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

from .ranks import ranked


def build(traces: Sequence, intervals: Iterable, script_name: str, window: Optional[str] = None) -> dict:
    """The trace of ``intervals`` (those :mod:`.timeline` kept; ``window`` says what was left out, if anything)."""
    origin = min((t.start_ns for t in traces), default=0)
    events: List[dict] = []
    pids = {t.pid for t in traces}
    # one rank alone (a leftover RANK=0, mpirun -n 1) is labelled as a plain run
    with_ranks = ranked(traces)
    for trace in traces:
        worker = trace.ppid in pids
        rank = trace.rank if with_ranks else None
        if rank is not None:
            label = f"rank {rank}" + (f" worker (pid {trace.pid})" if worker else f" (pid {trace.pid})")
        elif worker:
            label = f"worker process (pid {trace.pid}, parent {trace.ppid})"
        else:
            label = f"{script_name} (pid {trace.pid})"
        order = 2 * (rank if rank is not None else 0) + (1 if worker else 0)
        events.append({"ph": "M", "name": "process_name", "pid": trace.pid, "args": {"name": label}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": trace.pid, "args": {"sort_index": order}})
        tids = {e.tid for e in trace.events} | set(trace.thread_names)
        for tid in sorted(tids):
            name = trace.thread_names.get(tid) or ("main" if tid == trace.pid else f"thread {tid}")
            events.append({"ph": "M", "name": "thread_name", "pid": trace.pid, "tid": tid, "args": {"name": name}})
        for event in trace.events:
            if event.kind in ("resume", "pause", "detach"):
                events.append({"ph": "i", "s": "p", "name": event.kind, "cat": "collection", "pid": trace.pid,
                               "tid": event.tid, "ts": (event.ts - origin) / 1000})
    for item in intervals:
        event = {"ph": "X", "name": item.name, "cat": item.domain, "pid": item.pid, "tid": item.tid,
                 "ts": (item.start - origin) / 1000, "dur": item.duration / 1000}
        if not item.finished:
            event["args"] = {"unfinished": True}
        events.append(event)
    other = {"producer": "autoitt", **({"window": window} if window else {})}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
