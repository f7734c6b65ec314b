"""``trace.json`` in Chrome's trace event format (ui.perfetto.dev, chrome://tracing).

One track per thread, named; processes labelled (the script, its workers; in
a multi-process run, :func:`~instrumenter.builtin.statistics.ranks.ranked`, "rank N",
with a rank's workers next to it);
tasks as complete (``X``) events with their ITT domain as category; resume
and pause as instant events. Timestamps are microseconds from the first
process's start.

The file is written as it is made, a few thousand events at a time, so a
timeline of millions of tasks never sits in memory as one string.
"""

from __future__ import annotations

import json
from typing import IO, Iterator, List, Optional, Sequence, Tuple

from ..statistics.aggregate import Intervals
from ..statistics.ranks import ranked

_BATCH = 20_000


def write(out: IO[str], traces: Sequence, kept: Intervals, groups: List[Tuple[str, str]], script_name: str,
          window: Optional[str] = None) -> None:
    """The trace of ``kept`` (what :mod:`..statistics.timeline` kept; ``window`` says what was left out, if anything)."""
    origin = min((t.start_ns for t in traces), default=0)
    out.write('{"traceEvents":[\n')
    out.write(",\n".join(json.dumps(event) for event in _metadata(traces, script_name, origin)))
    # names and categories escaped once per task, not once per instance
    heads = ['{"ph":"X","name":%s,"cat":%s,' % (json.dumps(name), json.dumps(domain)) for domain, name in groups]
    for begin in range(0, len(kept), _BATCH):
        part = kept.take(slice(begin, begin + _BATCH))
        out.write(",\n" if begin or traces else "")
        out.write(",\n".join(
            f'{heads[group]}"pid":{pid},"tid":{tid},"ts":{start / 1000},"dur":{duration / 1000}'
            + ("}" if finished else ',"args":{"unfinished":true}}')
            for group, pid, tid, start, duration, finished in zip(
                part.group.tolist(), part.pid.tolist(), part.tid.tolist(), (part.start - origin).tolist(),
                part.duration.tolist(), part.finished.tolist())))
    other = {"producer": "autoitt", **({"window": window} if window else {})}
    out.write('\n],"displayTimeUnit":"ms","otherData":' + json.dumps(other) + "}\n")


def _metadata(traces: Sequence, script_name: str, origin: int) -> Iterator[dict]:
    """Process and thread names, and the collection's pause and resume instants."""
    pids = {t.pid for t in traces}
    # one rank alone (a leftover RANK=0, mpirun -n 1) is labelled as a plain run
    with_ranks = ranked(traces)
    kinds = {3: "pause", 4: "resume", 5: "detach", 6: "trace limit reached"}
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
        yield {"ph": "M", "name": "process_name", "pid": trace.pid, "args": {"name": label}}
        yield {"ph": "M", "name": "process_sort_index", "pid": trace.pid, "args": {"sort_index": order}}
        for tid in sorted(set(trace.threads) | set(trace.thread_names)):
            name = trace.thread_names.get(tid) or ("main" if tid == trace.pid else f"thread {tid}")
            yield {"ph": "M", "name": "thread_name", "pid": trace.pid, "tid": tid, "args": {"name": name}}
        for ts, kind, tid in trace.controls:
            yield {"ph": "i", "s": "p", "name": kinds[kind], "cat": "collection", "pid": trace.pid, "tid": tid,
                   "ts": (ts - origin) / 1000}
