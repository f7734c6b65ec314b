"""Read the trace files written by autoitt's ITT collector (``instrumenter/collector``).

This docstring is the only documentation of what the format means; the collector's
``writer.c`` (with ``trace_limit.c`` and ``counters.c``) writes it and this module reads it.  Its
layouts, kinds, flags and constants are defined once, in ``instrumenter/collector/formats.py``,
whence both sides take them.

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
* a file is never written over. Where the folder already holds a file of the
  pid (``itt-`` or ``samples-``), the process's files and headers carry
  ``pid + n * 2**22`` instead, for the first n that is free (Linux pids are
  below 2**22): the program that a process ``exec``'d (same pid; the one
  before it wrote what it held first, see below), or a process given the pid
  of one that ended earlier in the run. Readers tell processes apart by this
  number, and the pid field below holds it.
* data reaches the file when a thread's 64 KiB buffer fills, when the thread
  ends, on ``__itt_pause``/``__itt_detach`` (every thread's buffer), and at a
  normal process exit (``exit()``, ``sys.exit``, an uncaught Python exception,
  and the end of Python's finalization, which a run stopped by SIGINT reaches
  through ``KeyboardInterrupt`` before it kills itself with SIGINT).  In a
  forked child a thread's buffer is also written each time its outermost task
  ends, because forked children usually end with ``os._exit`` (multiprocessing
  workers, DataLoader workers), which flushes nothing.  Before an ``exec``
  (``os.execv``, ``os.execve``: ``execve``, ``execv``, ``execvp``, ``execvpe``,
  ``fexecve`` called from any object but libc, while sampling is on) every
  thread's buffer is written too; tasks open then have no end in the file.  A signal that ends the
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
16     u32   pid (``pid + n * 2**22`` for a later file of the same pid, see Files)
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
1      u8    flags: bit 0 = pause/resume from ``__itt_pause_scoped``/``__itt_resume_scoped``;
             ends past the trace limit: bit 1 = ``b`` holds child time, bit 2 = unfinished
2      u16   name length (name records only; else 0)
4      u32   aux: the collection scope for scoped pause/resume; else 0
8      u64   timestamp, in the record clock (see Timestamps)
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
6     limit          the file reached its trace limit (``a`` bytes) here: see The trace limit
7     counters       at the end of a task of an own domain (``AUTOITT_OWN_DOMAINS``: autoitt's
                     markers), what the process counted while it ran: ``a`` CPU time (ns,
                     CLOCK_PROCESS_CPUTIME_ID: every thread), ``b`` the task's string handle,
                     ``aux`` page faults (minor and major), ``name_len`` context switches
                     (voluntary and not; ``getrusage(RUSAGE_SELF)``, 65535 at most); see Counters.
                     With flag 8 (counted from), ``ts`` is when the counting began: the end record
                     right before it (its task's) ends the counted span
8     hardware       right after a counters record where the PMU can be read: ``a`` cycles, ``b``
                     instructions (user mode, every thread of the process)
9     hardware 2     right after a hardware record: ``a`` cache misses, ``b`` branch misses
20    note           the bytes say something about the collection (why hardware counters are
                     not read: ``perf_event_open`` refused or not supported)
16    domain name    the domain at pointer ``a`` is named by the bytes
17    string name    the string handle at pointer ``a`` is named by the bytes
18    thread name    the chunk's thread is named by the bytes (its ``prctl`` name when it
                     first records, then each ``__itt_thread_set_name``; the latest wins)
19    statistics     counts of task (``a``, ``b``) past the trace limit (below); its bytes
                     are 8 u64 (count, summed duration, time inside, self time, min, max,
                     time in outermost instances, unfinished; ns) then (bucket, count) u32
                     pairs; ``ts`` is the thread's last record
21    paused begins  written at exit: ``a`` tasks named by the bytes began on an own domain
                     while collection was paused (what ran outside collection)
===== ============== ============================================================

Pointers are resolved through the name records of the whole file, wherever
they are: domains and string handles are never freed, so a pointer names one
thing for the life of the process.  Name records are written when the object
is created (or, for objects an ITT static part created before it attached the
collector, when it attaches), before any event that uses them; a forked
child's file repeats every name the parent knew.  A pointer without a name
record is shown as ``<domain 0x...>``/``<string 0x...>``, with a warning.

Counters
--------

With ``AUTOITT_OWN_DOMAINS`` naming autoitt's domains (comma-separated), the
collector reads the process's CPU time, page faults and context switches
when a task of one of them begins, and writes what they grew by when it ends
(counters record, kind 7); where ``perf_event_open`` gives hardware counters
(cycles, instructions, cache misses, branch misses: not in most VMs), kinds 8
and 9 follow it with theirs. The counts are the process's, every thread
included (OpenMP workers count in the step that keeps them busy); nested own
tasks each count their own span (an epoch's include its steps'). Own tasks at
one nesting depth of a thread are counted at most once per 10 ms (reading the
counts costs a real step ~20 µs, its kernel paths cold), so a loop of short
steps has one counted per 10 ms: the records' count says how many were. Each counters record
is timed at its counting's start (flag 8) and written right after its task's end record, so
the wall time its counts cover is the end's time minus its own (where a flush came between,
the record is timed when written, without the flag, and its span is not known). Past the trace
limit they are not written: they cover the tasks before it.

Collection control
------------------

Like ``vtune -start-paused``: with ``AUTOITT_START_PAUSED=1`` the collector
starts paused.  While paused (after a pause, or before the first resume when
started paused), task begin/end calls are dropped; pause, resume, detach and
name records are always written.  After a detach no task is recorded any more.

The trace limit
---------------

With ``AUTOITT_TRACE_LIMIT`` set to a number of bytes, a file stops growing
there (give or take a few records): a buffer that would take it past the
limit is not written but counted by the collector, per thread and task, and
the counts since the last ones are written as statistics records at each
pause, detach, exit and fatal signal. Past the limit the file still gets the
``limit`` mark, pause, resume and detach, and the end of each task whose begin
it holds, with the time that task spent in counted child tasks in ``b`` (flag
bit 1); tasks still open at exit get such an end too, flagged unfinished (bit
2), at the thread's last record. So the timeline stops at the limit, and the
statistics (a reader adds the counts to what it pairs) cover the whole run,
with the histogram buckets of :mod:`~instrumenter.builtin.statistics.aggregate`. Not
counted: tasks nested over 256 deep, and, in a task begun before the limit
and ended after it, the time inside another instance of itself.

Damage
------

A file cut short (the process was killed while writing, a copy was
truncated, the disk filled up) or damaged is read up to the damage: the
complete records before it are kept, and :attr:`ProcessTrace.warnings` says
where it stopped.  Only a file without a valid header raises
:class:`TraceFormatError`; :func:`~instrumenter.builtin.trace.scan.scan_trace_dir` skips such a file and names
it among the files skipped.

Reading
=======

:func:`~instrumenter.builtin.trace.scan.scan_trace_file` reads a file in blocks of
:data:`~instrumenter.builtin.trace.scan.BLOCK_BYTES`, so a
trace of any size is read in bounded memory: it returns the header at once and
fills the names, the collection events (pause, resume, detach) and the
warnings as its blocks are consumed; each block is every thread's task
records (begin, end) of that part of the file, as numpy arrays of
:data:`RECORD`, each thread's in its program order.
:func:`~instrumenter.builtin.trace.events.read_trace_file` is the same reader
giving every event as an object, for small traces (tests, inspection).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...collector import formats
from .clock import Clock

__all__ = ["ProcessTrace", "Stats", "TraceFormatError", "RECORD"]

# the layouts and constants are the collector's (instrumenter/collector/formats.py, whence its format.h)
FILE_MAGIC = formats.TRACE_MAGIC
FORMAT_VERSION = formats.TRACE_VERSION
FLAG_TSC = formats.TRACE_HEADER_FLAGS["TSC"]
CHUNK_MAGIC = formats.CHUNK_MAGIC

_HEADER = formats.FILE_HEADER.struct
_HEADER_V1 = formats.FILE_HEADER_V1.struct
_CHUNK = formats.CHUNK_HEADER.struct
_CHUNK_V1 = formats.CHUNK_HEADER_V1.struct
_RECORD = formats.RECORD.struct
#: One record, as numpy reads it.
RECORD = np.dtype(formats.RECORD.dtype_fields)

_KINDS = formats.TRACE_KINDS
KIND_BEGIN, KIND_END, KIND_PAUSE, KIND_RESUME, KIND_DETACH, KIND_LIMIT = (
    _KINDS[k] for k in ("BEGIN", "END", "PAUSE", "RESUME", "DETACH", "LIMIT"))
KIND_COUNTERS, KIND_HARDWARE, KIND_HARDWARE2 = (_KINDS[k] for k in ("COUNTERS", "HARDWARE", "HARDWARE2"))
KIND_DOMAIN_NAME, KIND_STRING_NAME, KIND_THREAD_NAME, KIND_STATS, KIND_NOTE, KIND_PAUSED_BEGINS = (
    _KINDS[k] for k in ("DOMAIN_NAME", "STRING_NAME", "THREAD_NAME", "STATS", "NOTE", "PAUSED_BEGINS"))
_EVENT_KINDS = {KIND_BEGIN: "begin", KIND_END: "end", KIND_PAUSE: "pause",
                KIND_RESUME: "resume", KIND_DETACH: "detach", KIND_LIMIT: "limit"}
#: fixed-size records that are not events (the counters), read with them
_COUNTER_KINDS = (KIND_COUNTERS, KIND_HARDWARE, KIND_HARDWARE2)
#: a counters record's flag: its ``ts`` is when its counting began, and the end record before it ends the span
FLAG_COUNTED_FROM = formats.RECORD_FLAGS["COUNTED_FROM"]
_NAME_KINDS = (KIND_DOMAIN_NAME, KIND_STRING_NAME, KIND_THREAD_NAME, KIND_NOTE, KIND_PAUSED_BEGINS)
_STATS_HEAD = formats.STATS_HEAD.struct


class TraceFormatError(Exception):
    """The file is not an autoitt trace at all (bad magic, short header, unknown version)."""


@dataclass
class ProcessTrace:
    """One process's file. From :func:`scan_trace_file`, ``events`` stays empty and the names, ``controls``,
    ``threads``, ``event_count`` and ``warnings`` are complete once its blocks are consumed."""

    path: Path
    pid: int
    ppid: int
    start_ns: int          # monotonic clock at collector start
    wall_start_ns: int     # realtime clock at the same moment
    events: list = field(default_factory=list)  # events.read_trace_file's: every Event, by time
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
    #: past the trace limit: the collector's counts (see The trace limit)
    stats: List["Stats"] = field(default_factory=list)
    #: per task string-handle pointer, what its instances' counters records add up to (see Counters):
    #: [instances, cpu ns, page faults, context switches, instances with hardware counts, cycles,
    #: instructions, cache misses, branch misses, instances whose counted span is known, its wall ns]
    counters: Dict[int, List[int]] = field(default_factory=dict)
    #: the collector's notes (note records)
    notes: List[str] = field(default_factory=list)
    #: task name -> how many tasks of that name began on an own domain while collection was paused
    paused_begins: Dict[str, int] = field(default_factory=dict)
    #: where the file is cut short or damaged (see Damage): what follows was not read; None: read to its end
    cut: Optional[str] = None

    def domain_name(self, pointer: int) -> str:
        return self.domains.get(pointer) or f"<domain {pointer:#x}>"

    def string_name(self, pointer: int) -> str:
        return self.strings.get(pointer) or f"<string {pointer:#x}>"


@dataclass(frozen=True)
class Stats:
    """One statistics record: a task's counts since the thread's previous ones (``count`` 0: more buckets)."""

    tid: int
    ts: int  # CLOCK_MONOTONIC ns: the thread's last record
    domain: int
    string: int
    head: Tuple[int, ...]  # count, sum, inside, self, min, max, outer, unfinished (ns)
    buckets: np.ndarray  # (bucket, count) rows


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _header(path: Path, data: bytes) -> Tuple[ProcessTrace, int, Clock, struct.Struct]:
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
    clock = Clock(ticks[0] if ticks else mono, mono, bool(flags & FLAG_TSC) and bool(ticks))
    return trace, header_size, clock, _CHUNK if version == FORMAT_VERSION else _CHUNK_V1
