"""Trace files in the collector's format (:mod:`instrumenter.builtin.trace.tracefile`), written without a process.

For the reader's tests and ``benchmarks/bench_reader.py``: names first, then
each thread's records in chunks of at most 2048 records, as the collector's
64 KiB buffers give them. :func:`event_scans` gives hand-made traces to the
streaming pass without a file.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from instrumenter.builtin.trace.tracefile import (_CHUNK, _HEADER, CHUNK_MAGIC, FILE_MAGIC, FORMAT_VERSION, KIND_BEGIN,
                                            KIND_DETACH, KIND_DOMAIN_NAME, KIND_END, KIND_PAUSE, KIND_RESUME,
                                            KIND_STRING_NAME, RECORD, ProcessTrace)
from instrumenter.builtin.trace.scan import Scan

CHUNK_RECORDS = 2048


def name_record(kind: int, pointer: int, name: str) -> bytes:
    raw = name.encode()
    return struct.pack("<BBHIQQQ", kind, 0, len(raw), 0, 0, pointer, 0) + raw + b"\0" * (-len(raw) % 8)


class TraceWriter:
    """One process's file: ``begin``/``end`` per thread, names given pointers as they first appear."""

    def __init__(self, path: Path, pid: int = 100, ppid: int = 1, rank: Optional[int] = None) -> None:
        self.path, self.pid = Path(path), pid
        self.handle = open(path, "wb")
        # the record clock is CLOCK_MONOTONIC ns (flag bit 1 clear): timestamps are written as given
        self.handle.write(_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, _HEADER.size, pid, ppid, 0, 0, 0,
                                       0 if rank is None else rank + 1, 0))
        self.pointers: Dict[Tuple[int, str], int] = {}
        self.names = bytearray()

    def pointer(self, kind: int, name: str) -> int:
        key = (kind, name)
        if key not in self.pointers:
            self.pointers[key] = 0x1000 * (len(self.pointers) + 1)
            self.names += name_record(kind, self.pointers[key], name)
        return self.pointers[key]

    def records(self, tid: int, rows: np.ndarray) -> None:
        """Writes ``rows`` (:data:`RECORD`) of thread ``tid``, after any name not yet written."""
        if self.names:
            self._chunk(tid, bytes(self.names))
            self.names.clear()
        for start in range(0, len(rows), CHUNK_RECORDS):
            self._chunk(tid, rows[start:start + CHUNK_RECORDS].tobytes())

    def events(self, tid: int, events: Iterable[Tuple[str, int, str, Optional[str]]]) -> None:
        """``(kind, ts, domain, name)`` with kind ``begin`` or ``end`` (name None), in program order."""
        rows = []
        for kind, ts, domain, name in events:
            a = self.pointer(KIND_DOMAIN_NAME, domain)
            b = self.pointer(KIND_STRING_NAME, name) if kind == "begin" else 0
            rows.append((KIND_BEGIN if kind == "begin" else KIND_END, 0, 0, 0, ts, a, b))
        self.records(tid, np.array(rows, dtype=RECORD))

    def _chunk(self, tid: int, body: bytes) -> None:
        self.handle.write(_CHUNK.pack(CHUNK_MAGIC, tid, len(body), 0, 0, 0) + body)

    def close(self) -> None:
        self.handle.close()


def steps_with_operators(writer: TraceWriter, steps: int, operators: int, tid: Optional[int] = None,
                         domain: str = "autoitt.train", step_ns: int = 1000, batch: int = 65536) -> None:
    """``steps`` step tasks of ``step_ns``, each holding ``operators`` PyTorch operator tasks (8 names)."""
    tid = writer.pid if tid is None else tid
    step = (writer.pointer(KIND_DOMAIN_NAME, domain), writer.pointer(KIND_STRING_NAME, "step"))
    torch = writer.pointer(KIND_DOMAIN_NAME, "PyTorch")
    ops: List[int] = [writer.pointer(KIND_STRING_NAME, f"aten::op{k}") for k in range(8)]
    per_step = 2 + 2 * operators
    gap = max(1, (step_ns - 20) // max(1, 2 * operators + 1))
    for first in range(0, steps, batch):
        count = min(batch, steps - first)
        rows = np.zeros((count, per_step), RECORD)
        base = (np.arange(count, dtype=np.uint64) + first) * step_ns
        rows["kind"][:, 0], rows["ts"][:, 0], rows["a"][:, 0], rows["b"][:, 0] = KIND_BEGIN, base, *step
        for k in range(operators):
            begin, end = 1 + 2 * k, 2 + 2 * k
            rows["kind"][:, begin], rows["a"][:, begin], rows["b"][:, begin] = KIND_BEGIN, torch, ops[k % 8]
            rows["ts"][:, begin] = base + gap * (2 * k + 1)
            rows["kind"][:, end], rows["a"][:, end] = KIND_END, torch
            rows["ts"][:, end] = base + gap * (2 * k + 2)
        rows["kind"][:, -1], rows["ts"][:, -1], rows["a"][:, -1] = KIND_END, base + step_ns - 10, step[0]
        writer.records(tid, rows.reshape(-1))


def write_events(path: Path, threads: Dict[int, Sequence[Tuple[str, int, str, Optional[str]]]],
                 pid: int = 100) -> None:
    writer = TraceWriter(path, pid)
    for tid, events in threads.items():
        writer.events(tid, events)
    writer.close()


def event_scans(traces: Iterable[ProcessTrace]) -> List[Scan]:
    """Traces given as :class:`Event` lists (:func:`read_trace_file`'s, or made by hand) as
    :func:`scan_trace_dir` gives them, without a file: one block each, names given pointers of their own."""
    kinds = {"begin": KIND_BEGIN, "end": KIND_END, "pause": KIND_PAUSE, "resume": KIND_RESUME,
             "detach": KIND_DETACH}
    scans = []
    for trace in traces:
        copy = ProcessTrace(path=trace.path, pid=trace.pid, ppid=trace.ppid, start_ns=trace.start_ns,
                            wall_start_ns=trace.wall_start_ns, rank=trace.rank,
                            thread_names=dict(trace.thread_names), warnings=list(trace.warnings))
        pointers: Dict[Tuple[str, str], int] = {}

        def pointer(table: Dict[int, str], what: str, name: Optional[str]) -> int:
            if name is None:
                return 0
            key = (what, name)
            if key not in pointers:
                pointers[key] = 0x1000 * (len(pointers) + 1)
                table[pointers[key]] = name
            return pointers[key]

        per_thread: Dict[int, list] = {}
        for event in trace.events:
            copy.threads.add(event.tid)
            copy.event_count += 1
            kind = kinds[event.kind]
            if kind >= KIND_PAUSE:
                copy.controls.append((event.ts, kind, event.tid))
                continue
            per_thread.setdefault(event.tid, []).append(
                (kind, 0, 0, 0, event.ts, pointer(copy.domains, "domain", event.domain),
                 pointer(copy.strings, "string", event.name) if kind == KIND_BEGIN else 0))
        block = {tid: np.array(rows, dtype=RECORD) for tid, rows in per_thread.items()}
        scans.append((copy, iter([block] if block else [])))
    return scans
