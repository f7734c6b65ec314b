"""Every event of a trace as a Python object: for small traces (tests, inspection), never for a run's summary
(:mod:`..statistics.aggregate` reads the blocks of :func:`~.tracefile.scan_trace_file` instead)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .scan import each_file, scan_trace_file
from .tracefile import _EVENT_KINDS, KIND_BEGIN, ProcessTrace


@dataclass(frozen=True, slots=True)
class Event:
    kind: str              # "begin" | "end" | "pause" | "resume" | "detach"
    pid: int
    tid: int
    ts: int                # ns, CLOCK_MONOTONIC
    domain: Optional[str]  # for begin/end (end: the domain passed to task_end)
    name: Optional[str]    # for begin: the task name; None otherwise


def read_trace_file(path: Path) -> ProcessTrace:
    """Reads one ``itt-<pid>.bin`` with every event as an :class:`Event` (threads merged by time);
    never raises on damage after a valid header, warns instead."""
    trace, blocks = scan_trace_file(path)
    per_thread: Dict[int, List[Tuple[int, int, int, int]]] = {}
    for block in blocks:
        for tid, records in block.items():
            per_thread.setdefault(tid, []).extend(
                zip(records["kind"].tolist(), records["ts"].tolist(), records["a"].tolist(), records["b"].tolist()))
    unknown: Dict[str, int] = {}

    def resolve(table: Dict[int, str], pointer: int, what: str) -> Optional[str]:
        if pointer == 0:
            return None
        name = table.get(pointer)
        if name is None:
            name = f"<{what} {pointer:#x}>"
            unknown[name] = unknown.get(name, 0) + 1
        return name

    events = []
    for tid, records in per_thread.items():
        events.extend(Event(_EVENT_KINDS[kind], trace.pid, tid, ts, resolve(trace.domains, a, "domain"),
                            resolve(trace.strings, b, "string") if kind == KIND_BEGIN else None)
                      for kind, ts, a, b in records)
    events.extend(Event(_EVENT_KINDS[kind], trace.pid, tid, ts, None, None) for ts, kind, tid in trace.controls)
    # a stable sort keeps each thread's own order where two of its timestamps are equal
    trace.events = sorted(events, key=lambda event: event.ts)
    for name, n in sorted(unknown.items()):
        trace.warnings.append(f"{path.name}: {n} events use {name}, which has no name record")
    return trace


@dataclass
class TraceDir:
    """The traces of one run: every file that could be read (sorted by pid), and why the others could not."""

    traces: List[ProcessTrace]
    #: ``itt-12.bin: ...`` for each file skipped (empty, cut before its header's end, not an autoitt trace)
    skipped: List[str]


def read_trace_dir(directory: Path) -> TraceDir:
    """Reads every ``itt-*.bin`` in ``directory`` (:func:`read_trace_file`); one that is not a trace at all
    is skipped, and named."""
    traces, skipped = each_file(directory, read_trace_file)
    return TraceDir(sorted(traces, key=lambda trace: trace.pid), skipped)
