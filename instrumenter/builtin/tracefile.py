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

File header (48 bytes)
----------------------

====== ===== ==========================================================
offset type  field
====== ===== ==========================================================
0      8s    magic ``b"AITTRACE"``
8      u32   format version, 1
12     u32   header size, 48 (a reader skips to this offset)
16     u32   pid
20     u32   ppid (for a forked child: the process it was forked from)
24     u64   CLOCK_MONOTONIC at collector start (library load, or the fork), ns
32     u64   CLOCK_REALTIME at the same moment, ns since the epoch
40     u32   flags: bit 0 = started paused (``AUTOITT_START_PAUSED``)
44     u32   the process's rank + 1, 0 when it has none: from ``RANK`` (torchrun),
             ``LOCAL_RANK``, ``OMPI_COMM_WORLD_RANK`` (Open MPI), ``PMI_RANK``
             (MPICH, Intel MPI) or ``SLURM_PROCID`` (Slurm; only when
             ``SLURM_NTASKS``, else ``SLURM_NPROCS``, is above 1), the first one
             set to a number, read when the collector loads (a forked child
             keeps its parent's)
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
====== ===== ==========================================================

A thread's chunks appear in the file in the thread's program order; chunks of
different threads interleave in any order.

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
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["Event", "ProcessTrace", "TraceDir", "TraceFormatError", "read_trace_file", "read_trace_dir"]

FILE_MAGIC = b"AITTRACE"
FORMAT_VERSION = 1
CHUNK_MAGIC = 0x4B4E4843

_HEADER = struct.Struct("<8sIIIIQQII")
_CHUNK = struct.Struct("<IIII")
_RECORD = struct.Struct("<BBHIQQQ")

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
    path: Path
    pid: int
    ppid: int
    start_ns: int          # monotonic clock at collector start
    wall_start_ns: int     # realtime clock at the same moment
    events: List[Event] = field(default_factory=list)  # each thread in program order, merged by ts
    rank: Optional[int] = None  # the launcher's (torchrun, MPI, Slurm: see the header), else None
    thread_names: Dict[int, str] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def read_trace_file(path: Path) -> ProcessTrace:
    """Reads one ``itt-<pid>.bin``; never raises on damage after a valid header, warns instead."""
    path = Path(path)
    data = path.read_bytes()
    label = path.name
    if len(data) < _HEADER.size:
        raise TraceFormatError(f"{path}: {len(data)} bytes, shorter than a trace header ({_HEADER.size})")
    magic, version, header_size, pid, ppid, mono, real, _flags, rank_plus_one = _HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC:
        raise TraceFormatError(f"{path}: not an autoitt trace (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise TraceFormatError(f"{path}: trace format version {version}, this reader knows {FORMAT_VERSION}")
    if header_size < _HEADER.size or header_size > len(data):
        raise TraceFormatError(f"{path}: bad header size {header_size}")
    trace = ProcessTrace(path=path, pid=pid, ppid=ppid, start_ns=mono, wall_start_ns=real,
                         rank=rank_plus_one - 1 if rank_plus_one else None)

    # raw events per thread: (kind, tid, ts, a, b); names by pointer
    per_thread: Dict[int, List[Tuple[int, int, int, int, int]]] = {}
    domains: Dict[int, str] = {}
    strings: Dict[int, str] = {}
    thread_names: Dict[int, Tuple[int, str]] = {}
    count = 0
    damage: Optional[str] = None

    offset = header_size
    end = len(data)
    while offset < end and damage is None:
        if end - offset < _CHUNK.size:
            damage = f"truncated at byte {offset}: partial chunk header"
            break
        cmagic, tid, length, _seq = _CHUNK.unpack_from(data, offset)
        if cmagic != CHUNK_MAGIC:
            damage = f"damaged at byte {offset}: bad chunk magic {cmagic:#x}"
            break
        body = offset + _CHUNK.size
        body_end = body + length
        if body_end > end:
            damage = f"truncated at byte {end}: chunk at byte {offset} announces {length} bytes, {end - body} present"
            body_end = end
        thread = per_thread.setdefault(tid, [])
        pos = body
        while pos < body_end:
            if body_end - pos < _RECORD.size:
                damage = damage or f"damaged at byte {pos}: partial record"
                break
            kind, _rflags, name_len, _aux, ts, a, b = _RECORD.unpack_from(data, pos)
            if kind in _EVENT_KINDS:
                thread.append((kind, tid, ts, a, b))
                count += 1
                pos += _RECORD.size
            elif kind in _NAME_KINDS:
                padded = (name_len + 7) & ~7
                if pos + _RECORD.size + padded > body_end:
                    damage = damage or f"damaged at byte {pos}: name record runs past its chunk"
                    break
                name = _decode(data[pos + _RECORD.size:pos + _RECORD.size + name_len])
                if kind == KIND_DOMAIN_NAME:
                    domains[a] = name
                elif kind == KIND_STRING_NAME:
                    strings[a] = name
                else:
                    previous = thread_names.get(tid)
                    if previous is None or ts >= previous[0]:
                        thread_names[tid] = (ts, name)
                pos += _RECORD.size + padded
            else:
                damage = f"damaged at byte {pos}: unknown record kind {kind}"
                break
        offset = body + length

    if damage is not None:
        trace.warnings.append(f"{label}: {damage}: read {count} events before the damage")

    unknown: Dict[str, int] = {}

    def resolve(table: Dict[int, str], pointer: int, what: str) -> Optional[str]:
        if pointer == 0:
            return None
        name = table.get(pointer)
        if name is None:
            name = f"<{what} {pointer:#x}>"
            unknown[name] = unknown.get(name, 0) + 1
        return name

    def events_of(raw: List[Tuple[int, int, int, int, int]]) -> List[Event]:
        out = []
        for kind, tid, ts, a, b in raw:
            domain = name = None
            if kind == KIND_BEGIN:
                domain = resolve(domains, a, "domain")
                name = resolve(strings, b, "string")
            elif kind == KIND_END:
                domain = resolve(domains, a, "domain")
            out.append(Event(_EVENT_KINDS[kind], pid, tid, ts, domain, name))
        return out

    per_thread_events = [events_of(raw) for raw in per_thread.values() if raw]
    # heapq.merge keeps each thread's own order even if two of its timestamps were equal
    trace.events = list(heapq.merge(*per_thread_events, key=lambda event: event.ts))
    trace.thread_names = {tid: name for tid, (_ts, name) in thread_names.items()}
    for name, n in sorted(unknown.items()):
        trace.warnings.append(f"{label}: {n} events use {name}, which has no name record")
    return trace


@dataclass
class TraceDir:
    """The traces of one run: every file that could be read (sorted by pid), and why the others could not."""

    traces: List[ProcessTrace]
    #: ``itt-12.bin: ...`` for each file skipped (empty, cut before its header's end, not an autoitt trace)
    skipped: List[str]


def read_trace_dir(directory: Path) -> TraceDir:
    """Reads every ``itt-*.bin`` in ``directory``; one that is not a trace at all is skipped, and named."""
    traces, skipped = [], []
    for path in sorted(Path(directory).glob("itt-*.bin")):
        try:
            traces.append(read_trace_file(path))
        except TraceFormatError as exc:
            skipped.append(f"{path.name}: {str(exc).replace(str(path) + ': ', '')}; skipped")
        except OSError as exc:
            skipped.append(f"{path.name}: cannot read: {exc.strerror or exc}; skipped")
    return TraceDir(sorted(traces, key=lambda trace: trace.pid), skipped)
