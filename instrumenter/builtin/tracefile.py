"""Read the trace files written by autoitt's ITT collector (``instrumenter/collector``).

This docstring is the only documentation of the format; ``collector.c`` writes
it and this module reads it.  Standard library only.

Files
=====

The collector is a shared library that Intel's ITT static parts (in the
``ittapi`` module, ``libtorch_cpu.so``, TensorFlow's oneDNN) load through
``INTEL_LIBITTNOTIFY64``.  Each process writes its own file,
``$AUTOITT_TRACE_DIR/itt-<pid>.bin`` (the current directory when the variable
is unset; the directory is created if missing):

* a process creates its file when the first ITT static part in it attaches the
  collector (its first ITT call other than a domain or string-handle create).
  If the process records nothing after that, the file holds the header and
  maybe some name records, and reads as a trace with no events.  A process
  that never makes such a call has no file.
* a forked child (``os.fork``, DataLoader workers) writes ``itt-<childpid>.bin``,
  created when the child first records something; it never writes into the
  parent's file, and it starts with the names the parent knew.
* data reaches the file when a thread's 64 KiB buffer fills, when the thread
  ends, on ``__itt_pause``/``__itt_detach`` (every thread's buffer), and at a
  normal process exit (``exit()``, ``sys.exit``, an uncaught Python exception,
  and the end of Python's finalization, which a run stopped by SIGINT reaches
  through ``KeyboardInterrupt`` before it kills itself with SIGINT).  In a
  forked child a thread's buffer is also written each time its outermost task
  ends, because forked children usually end with ``os._exit`` (multiprocessing
  workers, DataLoader workers), which flushes nothing.  A signal that ends the
  process by default (SIGTERM, SIGHUP, SIGQUIT, SIGXCPU, and the crashes
  SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes every thread's buffer out
  first, unless the program handles that signal itself (then its own exit
  path decides).  What is lost: everything a thread still buffered (at most
  64 KiB per thread) when the process ends by SIGKILL, by ``os._exit`` outside
  a forked child, or while a thread was itself writing its buffer; and, in a
  crash, whatever the crash damaged.

All integers are little-endian (the collector is built for x86-64 Linux).
Offsets are in bytes.

File header (56 bytes)
----------------------

====== ===== ==========================================================
offset type  field
====== ===== ==========================================================
0      8s    magic ``b"AITTRACE"``
8      u32   format version, 2 (version 1: 48-byte header, 16-byte chunk headers,
             timestamps in ns; still read)
12     u32   header size, 56 (a reader skips to this offset)
16     u32   pid
20     u32   ppid (for a forked child: the process it was forked from)
24     u64   CLOCK_MONOTONIC at collector start (library load, or the fork), ns
32     u64   CLOCK_REALTIME at the same moment, ns since the epoch
40     u32   flags: bit 0 = started paused (``AUTOITT_START_PAUSED``); bit 1 =
             timestamps are TSC ticks (see Timestamps)
44     u32   the process's rank + 1, 0 when it has none: from ``RANK`` (torchrun),
             ``LOCAL_RANK``, ``OMPI_COMM_WORLD_RANK`` (Open MPI), ``PMI_RANK``
             (MPICH, Intel MPI) or ``SLURM_PROCID`` (Slurm; only when
             ``SLURM_NTASKS``, else ``SLURM_NPROCS``, is above 1), the first one
             set to a number, read when the collector loads (a forked child
             keeps its parent's)
48     u64   the record clock (see Timestamps) at the moment of offset 24
====== ===== ==========================================================

Chunks
------

Then chunks, back to back, each written with a single ``write()`` on an
``O_APPEND`` descriptor (so chunks of different threads never interleave):

====== ===== ==========================================================
0      u32   magic 0x4B4E4843 (``b"CHNK"``)
4      u32   tid (Linux thread id) of the thread whose records follow
8      u32   length in bytes of the records that follow (a multiple of 8)
12     u32   sequence number of the chunk within the thread's buffer (informative)
16     u64   the record clock when the chunk was written
24     u64   CLOCK_MONOTONIC at the same moment, ns
====== ===== ==========================================================

A thread's chunks appear in the file in the thread's program order; chunks of
different threads interleave in any order.

Timestamps
----------

Records carry the collector's record clock: CLOCK_MONOTONIC nanoseconds, or,
when header flag bit 1 is set, the CPU's time-stamp counter (``rdtsc``: about
15 ns a read in a VM, where ``clock_gettime`` takes 35), used when the kernel
keeps its own time with it (its clocksource is ``tsc``: constant rate,
synchronised across CPUs) and ``AUTOITT_CLOCK`` is not ``monotonic``. The
header and every chunk header pair a reading of the record clock with
CLOCK_MONOTONIC; a chunk's pair is taken as it is written, so it is later
than all of its records. The reader turns ticks into CLOCK_MONOTONIC ns by
linear interpolation between the pairs seen up to each record's own chunk
(kept at least 100 ms apart), so a file converts the same whatever follows it.

Records
-------

Each record is 32 bytes:

====== ===== ==========================================================
0      u8    kind (below)
1      u8    flags: bit 0 = pause/resume from ``__itt_pause_scoped``/``__itt_resume_scoped``
2      u16   name length (name records only; else 0)
4      u32   aux: the collection scope for scoped pause/resume; else 0
8      u64   timestamp, CLOCK_MONOTONIC ns
16     u64   a: the domain pointer (begin/end), the object pointer (domain and
             string names), 0 otherwise
24     u64   b: the string-handle pointer naming the task (begin), 0 otherwise
====== ===== ==========================================================

Name records are followed by their name's bytes (UTF-8, not terminated, cut at
4096 bytes), padded with zeros to a multiple of 8.

===== ============== ============================================================
kind  name           meaning
===== ============== ============================================================
1     begin          ``__itt_task_begin(a, _, _, b)``
2     end            ``__itt_task_end(a)``
3     pause          ``__itt_pause`` (or scoped)
4     resume         ``__itt_resume`` (or scoped)
5     detach         ``__itt_detach``
16    domain name    the domain at pointer ``a`` is named by the bytes
17    string name    the string handle at pointer ``a`` is named by the bytes
18    thread name    the chunk's thread is named by the bytes (its ``prctl`` name when it
                     first records, then each ``__itt_thread_set_name``; the latest wins)
===== ============== ============================================================

Pointers are resolved through the name records of the whole file, wherever
they are: domains and string handles are never freed, so a pointer names one
thing for the life of the process.  Name records are written when the object
is created (or, for objects an ITT static part created before it attached the
collector, when it attaches), before any event that uses them; a forked
child's file repeats every name the parent knew.  A pointer without a name
record is shown as ``<domain 0x...>``/``<string 0x...>``, with a warning.

Collection control
------------------

Like ``vtune -start-paused``: with ``AUTOITT_START_PAUSED=1`` the collector
starts paused.  While paused (after a pause, or before the first resume when
started paused), task begin/end calls are dropped; pause, resume, detach and
name records are always written.  After a detach no task is recorded any more.

Damage
------

A file cut short (the process was killed while writing, a copy was
truncated, the disk filled up) or damaged is read up to the damage: the
complete records before it are kept, and :attr:`ProcessTrace.warnings` says
where it stopped.  Only a file without a valid header raises
:class:`TraceFormatError`; :func:`read_trace_dir` skips such a file and names
it in :attr:`TraceDir.skipped`.

Reading
=======

:func:`scan_trace_file` reads a file in blocks of :data:`BLOCK_BYTES`, so a
trace of any size is read in bounded memory: it returns the header at once and
fills the names, the collection events (pause, resume, detach) and the
warnings as its blocks are consumed; each block is every thread's task
records (begin, end) of that part of the file, as numpy arrays of
:data:`RECORD`, each thread's in its program order.
:func:`read_trace_file` is the same reader giving every event as an
:class:`Event`, for small traces (tests, inspection).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

__all__ = ["Event", "ProcessTrace", "TraceDir", "TraceFormatError", "RECORD", "scan_trace_file", "read_trace_file",
           "read_trace_dir", "scan_trace_dir"]

FILE_MAGIC = b"AITTRACE"
FORMAT_VERSION = 2
FLAG_TSC = 2
#: Clock pairs closer than this are not kept (but the latest always is): the rate between two kept pairs
#: is measured over 100 ms at least, so the ~20 ns of a pair's own jitter stays below 1e-6 of it.
PAIR_SPACING_NS = 100_000_000
CHUNK_MAGIC = 0x4B4E4843

_HEADER = struct.Struct("<8sIIIIQQIIQ")
_HEADER_V1 = struct.Struct("<8sIIIIQQII")
_CHUNK = struct.Struct("<IIIIQQ")
_CHUNK_V1 = struct.Struct("<IIII")
_RECORD = struct.Struct("<BBHIQQQ")
#: One record, as numpy reads it.
RECORD = np.dtype([("kind", "u1"), ("flags", "u1"), ("name_len", "<u2"), ("aux", "<u4"),
                   ("ts", "<u8"), ("a", "<u8"), ("b", "<u8")])
#: How much of a file is read at a time: what bounds the reader's memory, whatever the file's size.
BLOCK_BYTES = 16 << 20

KIND_BEGIN, KIND_END, KIND_PAUSE, KIND_RESUME, KIND_DETACH = 1, 2, 3, 4, 5
KIND_DOMAIN_NAME, KIND_STRING_NAME, KIND_THREAD_NAME = 16, 17, 18
_EVENT_KINDS = {KIND_BEGIN: "begin", KIND_END: "end", KIND_PAUSE: "pause",
                KIND_RESUME: "resume", KIND_DETACH: "detach"}
_NAME_KINDS = (KIND_DOMAIN_NAME, KIND_STRING_NAME, KIND_THREAD_NAME)


class TraceFormatError(Exception):
    """The file is not an autoitt trace at all (bad magic, short header, unknown version)."""


@dataclass(frozen=True, slots=True)
class Event:
    kind: str              # "begin" | "end" | "pause" | "resume" | "detach"
    pid: int
    tid: int
    ts: int                # ns, CLOCK_MONOTONIC
    domain: Optional[str]  # for begin/end (end: the domain passed to task_end)
    name: Optional[str]    # for begin: the task name; None otherwise


@dataclass
class ProcessTrace:
    """One process's file. From :func:`scan_trace_file`, ``events`` stays empty and the names, ``controls``,
    ``threads``, ``event_count`` and ``warnings`` are complete once its blocks are consumed."""

    path: Path
    pid: int
    ppid: int
    start_ns: int          # monotonic clock at collector start
    wall_start_ns: int     # realtime clock at the same moment
    events: List[Event] = field(default_factory=list)  # each thread in program order, merged by ts
    rank: Optional[int] = None  # the launcher's (torchrun, MPI, Slurm: see the header), else None
    thread_names: Dict[int, str] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    #: pointer -> name, for task records' ``a`` (domain) and ``b`` (string handle)
    domains: Dict[int, str] = field(default_factory=dict)
    strings: Dict[int, str] = field(default_factory=dict)
    #: pause, resume and detach, in file order: (ts, kind, tid)
    controls: List[Tuple[int, int, int]] = field(default_factory=list)
    #: every thread that wrote a record
    threads: set = field(default_factory=set)
    event_count: int = 0

    def domain_name(self, pointer: int) -> str:
        return self.domains.get(pointer) or f"<domain {pointer:#x}>"

    def string_name(self, pointer: int) -> str:
        return self.strings.get(pointer) or f"<string {pointer:#x}>"


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Clock:
    """The record clock of one file, to CLOCK_MONOTONIC ns (see Timestamps): pairs (ticks, ns) kept at
    least :data:`PAIR_SPACING_NS` apart, the last one always the latest."""

    def __init__(self, ticks: int, mono: int, tsc: bool) -> None:
        self.tsc = tsc
        self.ticks, self.mono = [ticks], [mono]
        self._arrays: Optional[Tuple[np.ndarray, np.ndarray]] = None

    def add(self, ticks: int, mono: int) -> None:
        if not self.tsc or ticks <= self.ticks[-1]:
            return
        if len(self.ticks) >= 2 and mono - self.mono[-2] < PAIR_SPACING_NS:
            self.ticks[-1], self.mono[-1] = ticks, mono
        else:
            self.ticks.append(ticks)
            self.mono.append(mono)
        self._arrays = None

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        if not self.tsc:
            return ticks
        t0, m0 = self.ticks[0], self.mono[0]
        if self._arrays is None:
            self._arrays = (np.array(self.ticks, np.float64) - t0, np.array(self.mono, np.float64) - m0)
        xp, fp = self._arrays
        since = (ticks.astype(np.int64) - np.int64(t0)).astype(np.float64)
        ns = np.interp(since, xp, fp)
        beyond = since > xp[-1]
        if beyond.any():
            slope = fp[-1] / xp[-1] if xp[-1] > 0 else 1.0
            ns[beyond] = fp[-1] + (since[beyond] - xp[-1]) * slope
        return (np.rint(ns).astype(np.int64) + m0).astype(np.uint64)


def _header(path: Path, data: bytes) -> Tuple[ProcessTrace, int, _Clock, struct.Struct]:
    if len(data) < _HEADER_V1.size:
        raise TraceFormatError(f"{path}: {len(data)} bytes, shorter than a trace header ({_HEADER.size})")
    magic, version, header_size = struct.unpack_from("<8sII", data, 0)
    if magic != FILE_MAGIC:
        raise TraceFormatError(f"{path}: not an autoitt trace (magic {magic!r})")
    if version not in (1, FORMAT_VERSION):
        raise TraceFormatError(f"{path}: trace format version {version}, this reader knows 1 and {FORMAT_VERSION}")
    layout = _HEADER if version == FORMAT_VERSION else _HEADER_V1
    if len(data) < layout.size:
        raise TraceFormatError(f"{path}: {len(data)} bytes, shorter than a trace header ({layout.size})")
    _magic, _version, header_size, pid, ppid, mono, real, flags, rank_plus_one, *ticks = layout.unpack_from(data, 0)
    if header_size < layout.size:
        raise TraceFormatError(f"{path}: bad header size {header_size}")
    trace = ProcessTrace(path=path, pid=pid, ppid=ppid, start_ns=mono, wall_start_ns=real,
                         rank=rank_plus_one - 1 if rank_plus_one else None)
    clock = _Clock(ticks[0] if ticks else mono, mono, bool(flags & FLAG_TSC) and bool(ticks))
    return trace, header_size, clock, _CHUNK if version == FORMAT_VERSION else _CHUNK_V1


Block = Dict[int, np.ndarray]
#: A file being read: its header (names and the rest filled as the blocks are consumed), and its blocks.
Scan = Tuple[ProcessTrace, Iterator[Block]]


def scan_trace_file(path: Path, block_bytes: int = BLOCK_BYTES) -> Tuple[ProcessTrace, Iterator[Block]]:
    """The header of one ``itt-<pid>.bin`` (:class:`TraceFormatError` if it has none), and its blocks.

    Each block maps a thread id to that thread's begin and end records (:data:`RECORD`) in the part of
    the file read, in program order. Damage after the header ends the blocks and becomes a warning.
    """
    path = Path(path)
    handle = open(path, "rb")
    try:
        trace, header_size, clock, chunk = _header(path, handle.read(_HEADER.size))
        size = path.stat().st_size
        if header_size > size:
            raise TraceFormatError(f"{path}: bad header size {header_size}")
    except BaseException:
        handle.close()
        raise
    handle.seek(header_size)
    return trace, _blocks(trace, handle, header_size, block_bytes, clock, chunk)


def _blocks(trace: ProcessTrace, handle, offset: int, block_bytes: int, clock: _Clock,
            chunk: struct.Struct) -> Iterator[Block]:
    label = trace.path.name
    thread_names: Dict[int, Tuple[int, str]] = {}
    damage: Optional[str] = None
    data = b""  # what is read and not yet parsed: the file from byte ``offset`` on
    with handle:
        while damage is None:
            more = handle.read(block_bytes)
            data += more
            if not data:
                break
            per_thread: Dict[int, List[np.ndarray]] = {}
            pos, end = 0, len(data)
            while damage is None and pos < end:
                if end - pos < chunk.size:
                    if not more:
                        damage = f"truncated at byte {offset + pos}: partial chunk header"
                    break
                cmagic, tid, length, _seq, *pair = chunk.unpack_from(data, pos)
                if cmagic != CHUNK_MAGIC:
                    damage = f"damaged at byte {offset + pos}: bad chunk magic {cmagic:#x}"
                    break
                body = pos + chunk.size
                if pair:
                    clock.add(*pair)
                if body + length > end:
                    if more:
                        break  # the chunk goes on in the next block
                    damage = (f"truncated at byte {offset + end}: chunk at byte {offset + pos} announces "
                              f"{length} bytes, {end - body} present")
                records, found = _chunk(trace, data, body, min(body + length, end), tid, thread_names, offset)
                damage = damage or found
                if clock.tsc and len(records):
                    # chunk by chunk, with the pairs up to this one's: what a file holds converts the
                    # same whatever follows it (a file cut short, a run still writing)
                    records = records.copy()
                    records["ts"] = clock.to_ns(records["ts"])
                trace.threads.add(tid)
                if len(records):
                    per_thread.setdefault(tid, []).append(records)
                pos = min(body + length, end)
            block = {}
            for tid, parts in per_thread.items():
                records = parts[0] if len(parts) == 1 else np.concatenate(parts)
                control = records["kind"] >= KIND_PAUSE
                if control.any():
                    trace.controls.extend(zip(records["ts"][control].tolist(), records["kind"][control].tolist(),
                                              [tid] * int(control.sum())))
                    records = records[~control]
                trace.event_count += int(control.sum()) + len(records)
                if len(records):
                    block[tid] = records
            if block:
                yield block
            data, offset = data[pos:], offset + pos
            if not more:
                break
    if damage is not None:
        trace.warnings.append(f"{label}: {damage}: read {trace.event_count} events before the damage")
    trace.thread_names = {tid: name for tid, (_ts, name) in thread_names.items()}


def _chunk(trace: ProcessTrace, data: bytes, body: int, body_end: int, tid: int,
           thread_names: Dict[int, Tuple[int, str]], base: int) -> Tuple[np.ndarray, Optional[str]]:
    """One chunk's event records; name records go to ``trace``; the damage found, if any."""
    length = body_end - body
    if length % RECORD.itemsize == 0:
        records = np.frombuffer(data, RECORD, count=length // RECORD.itemsize, offset=body)
        kinds = records["kind"]
        if len(kinds) == 0 or (kinds.min() >= KIND_BEGIN and kinds.max() <= KIND_DETACH):
            return records, None  # the usual chunk: events only
    # a chunk with names in it (a thread's first, mostly) or damage: record by record
    kept: List[Tuple] = []
    damage = None
    pos = body
    while pos < body_end:
        if body_end - pos < _RECORD.size:
            damage = f"damaged at byte {base + pos}: partial record"
            break
        record = _RECORD.unpack_from(data, pos)
        kind, name_len, ts, a = record[0], record[2], record[4], record[5]
        if kind in _EVENT_KINDS:
            kept.append(record)
            pos += _RECORD.size
        elif kind in _NAME_KINDS:
            padded = (name_len + 7) & ~7
            if pos + _RECORD.size + padded > body_end:
                damage = f"damaged at byte {base + pos}: name record runs past its chunk"
                break
            name = _decode(data[pos + _RECORD.size:pos + _RECORD.size + name_len])
            if kind == KIND_DOMAIN_NAME:
                trace.domains[a] = name
            elif kind == KIND_STRING_NAME:
                trace.strings[a] = name
            else:
                previous = thread_names.get(tid)
                if previous is None or ts >= previous[0]:
                    thread_names[tid] = (ts, name)
            pos += _RECORD.size + padded
        else:
            damage = f"damaged at byte {base + pos}: unknown record kind {kind}"
            break
    return np.array(kept, dtype=RECORD), damage


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


def _each_file(directory: Path, open_one) -> Tuple[list, List[str]]:
    opened, skipped = [], []
    for path in sorted(Path(directory).glob("itt-*.bin")):
        try:
            opened.append(open_one(path))
        except TraceFormatError as exc:
            skipped.append(f"{path.name}: {str(exc).replace(str(path) + ': ', '')}; skipped")
        except OSError as exc:
            skipped.append(f"{path.name}: cannot read: {exc.strerror or exc}; skipped")
    return opened, skipped


def read_trace_dir(directory: Path) -> TraceDir:
    """Reads every ``itt-*.bin`` in ``directory`` (:func:`read_trace_file`); one that is not a trace at all
    is skipped, and named."""
    traces, skipped = _each_file(directory, read_trace_file)
    return TraceDir(sorted(traces, key=lambda trace: trace.pid), skipped)


def scan_trace_dir(directory: Path) -> Tuple[List[Tuple[ProcessTrace, Iterator[Block]]], List[str]]:
    """:func:`scan_trace_file` for every ``itt-*.bin`` in ``directory``, by pid; and the files skipped."""
    scans, skipped = _each_file(directory, scan_trace_file)
    return sorted(scans, key=lambda scan: scan[0].pid), skipped
