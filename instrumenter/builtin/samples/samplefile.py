"""Read the CPU-time samples written by autoitt's ITT collector (``samples-<pid>.bin``).

This docstring is the only documentation of what the format means; the collector's ``sampler.c`` writes it
and this module reads it (its layouts, kinds and flags from ``instrumenter/collector/formats.py``).

What is sampled
===============

While a process runs with the collector attached (from its first ITT call
other than a create), every sampled thread is interrupted about
``AUTOITT_SAMPLE_HZ`` times per second of its own user-mode CPU time (default
1000; ``0``: no sampling, no file), paused or not.  Each sample records:

* native frames, up to 128, unwound with ``.eh_frame``; after code without
  unwind information (JIT kernels) a walk resumes at most twice (bit 9);
* Python frames, up to 64, as (code object, instruction), on CPython 3.11 to
  3.15 (elsewhere none, and a reason record says so); each code object's names and
  line table are written once, and lines are computed here;
* the thread's innermost open ITT task, and its innermost open task of an
  *own* domain (``AUTOITT_OWN_DOMAINS``, default ``autoitt.train``), else the
  process's current own task, flagged *inherited* (OpenMP and oneDNN workers);
  values are ``itt-<pid>.bin``'s pointers; a pause forgets the open tasks;
* whether collection was paused or detached.

Mechanism (``sampler.c`` in ``instrumenter/collector`` has the design and
safety audit): a ``perf_event_open`` ``cpu-clock`` event per thread, else
(refused, or a small limit on open files) POSIX CPU-time timers (one sample
per tick at most, weighted); the info record says which, a reason record why.
Sampled: threads with an alternate signal stack (started once sampling runs,
the one that started it, any at its first ITT call; a reason record counts
the others), listed every 50 ms; never the collector's own.

Files
=====

Each process writes ``$AUTOITT_TRACE_DIR/samples-<pid>.bin`` next to its ``itt-<pid>.bin`` (the same
number: ``pid + n * 2**22`` where a file of the pid is there, see :mod:`..trace.tracefile`); a forked child its
own, from 10 ms after the fork.  Data is written every 50 ms (20 in a forked child), at each pause or detach, at a
normal exit (with the map, the counts and an end record) and, best effort, at
a fatal signal.  Lost: the last 50 ms of a process ended by SIGKILL or
``os._exit`` (forked workers), and samples dropped when a thread's buffer (128
samples) was full (counted).

All integers are little-endian.  Header (48 bytes):

====== ===== ==========================================================
offset type  field
====== ===== ==========================================================
0      8s    magic ``b"AITSAMPL"``
8      u32   format version, 1
12     u32   header size, 48 (a reader skips to this offset)
16     u32   pid
20     u32   ppid
24     u32   flags: bit 0 = timestamps are TSC ticks (as in :mod:`..trace.tracefile`'s
             Timestamps); bit 1 = a forked child
28     u32   0
32     u64   the record clock when the file was created
40     u64   CLOCK_MONOTONIC at the same moment, ns
====== ===== ==========================================================

Then records, back to back: u32 kind, u32 payload length, the payload, zero
padding to a multiple of 8.  A reader skips kinds it does not know.  Records
are written by whole ``write()`` calls on an ``O_APPEND`` descriptor by one
thread at a time.

===== ========== ===================================================================
kind  name       payload
===== ========== ===================================================================
1     info       u32 rate (Hz), u32 mechanism (0 none, 1 perf cpu-clock, 2 POSIX CPU
                 timers), u32 signal number, u32 Python frames (0 none: no Python in
                 the process, 1 yes, 2 unsupported version), u64 period (ns), u64
                 address and u64 size of ``_PyEval_EvalFrameDefault`` (0: unknown),
                 u32 ``Py_Version``, u32 max native frames, u32 max Python frames,
                 u32 buffer slots per thread, u64 address and u64 size of the
                 evaluator's cold part (0: none found).  Written at the start and
                 again whenever the mechanism changes; the last one holds.
2     reason     UTF-8 text: why samples are fewer or poorer than asked (perf refused,
                 a small limit on open files, Python unsupported, threads not sampled,
                 the signal's handler replaced behind the collector's back), or absent.
3     clock      u64 record clock, u64 CLOCK_MONOTONIC ns: a pair taken at that moment
                 (one per write; the reader converts ticks as :class:`..trace.clock.Clock`).
4     thread     u32 tid, u32 0, the thread's name (``comm``) when first seen.
5     code       u32 code id, i32 ``co_firstlineno``, u32 file name length, u32
                 qualified name length, u32 line table length, u32 0, then the three
                 byte strings: ``co_filename`` and ``co_qualname`` (UTF-8, cut at 1024
                 bytes) and ``co_linetable`` (CPython's location table; empty if
                 over 64 KiB).
6     stack      u32 stack id, u16 Python frame count (bit 15: the middle cut), u16
                 native frame count, then the native frames (u64 each, innermost first: the first is the
                 interrupted instruction, the others return addresses), then the Python
                 frames (u64 each, innermost first: ``code_id << 32 | (lasti + 1) << 1 |
                 is_entry``, lasti the frame's last instruction in 2-byte code units, -1
                 before its first, is_entry whether the frame began a C-level call of
                 ``_PyEval_EvalFrameDefault``; code id 0: unknown code object).  Each
                 distinct stack is written once, before or in the same write as the
                 first sample that uses it; ids are not reused.
7     samples    56-byte entries: u64 record-clock time, u32 tid, u32 stack id, u32
                 flags (below), u32 weight (CPU-time periods the sample stands for), u64
                 task domain, u64 task string handle (the thread's innermost open task;
                 0: none), u64 autoitt domain, u64 autoitt task string handle (its
                 ``autoitt.train`` task; 0: none).
8     raw sample a sample written from a fatal signal's handler: the 56-byte entry
                 (stack id 0), u16 Python frame count, u16 native frame count, u32 0,
                 then the frames as in a stack record.
9     maps       u32 sequence number, u32 flags (bit 0: the last part of this
                 sequence number), then text: the executable lines of
                 ``/proc/self/maps`` (start-end perms offset dev inode path).  A
                 new sequence number is written whenever the executable mappings
                 changed; an address is looked up in the latest one holding it.
10    counts     u32 tid, u32 thread instance, u64 samples taken, u64 samples dropped
                 (the thread's buffer was full), u64 record-clock ticks spent in the
                 signal handler: cumulative, the last record of an instance holds.
11    end        empty: the process ended normally and the file is complete.
12    lost       u32 tid, u32 thread instance, u64 samples lost while the program had
                 replaced the handler (perf: estimated from the event's count), as counts.
===== ========== ===================================================================

Sample flags: bit 0 collection paused, bit 1 detached, bit 2 the autoitt task is inherited from the process,
bit 3 the thread had more than 64 tasks open (the task is the 64th), bit 4 the stack pointer was outside the
thread's stack, bit 5 a library was being unloaded (4, 5: only the interrupted instruction), bit 6 off-CPU (the
thread was blocked: Python frames only, weight the wall time since its last look); native walk: bit 8 truncated
at the maximum, bit 9 resumed after code without unwind information, bit 10 ended at code without unwind
information, bit 11 ended at a frame its rules could not unwind; Python walk: bit 12 outermost frame not
reached, bit 13 stopped at a frame that did not look valid, bit 14 a code object had no id, bit 15 a cut middle.

Reading
=======

:func:`read_sample_file` returns a :class:`SampleFile`: numpy arrays, one
element per sample, the stacks interned (:attr:`SampleFile.stack` indexes
:attr:`SampleFile.stacks`), codes, map, counts and reasons (memory grows with
distinct stacks, not samples).  :func:`~.mixedstacks.merge_frames` interleaves
native and Python frames; :mod:`.symbols` names native addresses.
"""

from __future__ import annotations

import bisect
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from ...collector import formats
from ..trace.clock import Clock
from .mixedstacks import Code, Frame, Mapping, line_ranges, merge_frames, parse_maps, python_frames, stack_counts

__all__ = ["SampleFile", "SampleFormatError", "Code", "Mapping", "ThreadCounts", "read_sample_file",
           "read_sample_dir", "merge_frames", "line_ranges", "parse_maps", "Frame", "SAMPLE"]

# the layouts and constants are the collector's (instrumenter/collector/formats.py, whence its format.h)
MAGIC = formats.SAMPLES_MAGIC
VERSION = formats.SAMPLES_VERSION
_HEADER, _RECORD, _INFO, _CODE, _STATS, _LOST, _CLOCK, _STACK_HEAD, _MAPS_HEAD, _THREAD_HEAD, _RAW_TAIL = (
    layout.struct for layout in (formats.SAMPLES_HEADER, formats.SAMPLES_RECORD_HEAD, formats.SAMPLES_INFO,
                                 formats.SAMPLES_CODE_HEAD, formats.SAMPLES_STATS, formats.SAMPLES_LOST,
                                 formats.SAMPLES_CLOCK, formats.SAMPLES_STACK_HEAD, formats.SAMPLES_MAPS_HEAD,
                                 formats.SAMPLES_THREAD_HEAD, formats.SAMPLES_RAW_TAIL))
R_INFO, R_REASON, R_CLOCK, R_THREAD, R_CODE, R_STACK, R_SAMPLES, R_RAW_SAMPLE, R_MAPS, R_STATS, R_END, R_LOST = (
    formats.SAMPLES_KINDS[k] for k in ("INFO", "REASON", "CLOCK", "THREAD", "CODE", "STACK", "SAMPLES", "RAW_SAMPLE",
                                       "MAPS", "STATS", "END", "LOST"))
HEADER_TSC, HEADER_FORKED = formats.SAMPLES_HEADER_FLAGS["TSC"], formats.SAMPLES_HEADER_FLAGS["FORKED"]

#: One sample entry of a ``samples`` record.
SAMPLE = np.dtype(formats.SAMPLE.dtype_fields)

# sample flags (see Sample flags)
F_PAUSED, F_DETACHED, F_INHERITED, F_TASKS_OVERFLOW, F_NO_STACK_MAP, F_UNLOADING, F_OFF_CPU = (
    formats.SAMPLE_FLAGS[k] for k in ("PAUSED", "DETACHED", "INHERITED", "TASKS_OVERFLOW", "NO_STACK_MAP", "UNLOADING",
                                      "OFF_CPU"))
F_NATIVE_TRUNCATED, F_NATIVE_RESTARTED, F_NATIVE_NO_INFO, F_NATIVE_FAILED = (
    formats.NATIVE_WALK[k] << formats.NATIVE_SHIFT for k in ("TRUNCATED", "RESTARTED", "NOINFO", "FAILED"))
F_PY_TRUNCATED, F_PY_INVALID, F_PY_UNKNOWN_CODE, F_PY_CUT = (
    formats.PYTHON_WALK[k] << formats.PYTHON_SHIFT for k in ("TRUNCATED", "INVALID", "UNKNOWN_CODE", "CUT"))

MECHANISMS = {value: name.lower() for name, value in formats.MECHANISMS.items()}
PYTHON = {value: "frames" if name == "OK" else name.lower() for name, value in formats.PYTHON_FRAMES.items()}


class SampleFormatError(Exception):
    """Not a samples file at all (bad magic, short header, unknown version)."""


@dataclass
class ThreadCounts:
    samples: int = 0
    dropped: int = 0
    handler_ns: int = 0  # time spent in the signal handler, summed
    lost: int = 0  # perf: samples lost while the program had replaced the handler (estimated)


@dataclass
class SampleFile:
    """One process's samples (see the module docstring).  Per-sample arrays are in file order (by thread,
    then time within each drain); sort by :attr:`ns` for a timeline."""

    path: Path
    pid: int
    ppid: int
    forked: bool
    rate_hz: int = 0
    period_ns: int = 0
    mechanism: str = "none"  # "perf", "timer" or "none"
    signal: int = 0
    python: str = "none"  # "frames", "none" (no Python in the process) or "unsupported"
    python_version: Optional[Tuple[int, int]] = None
    #: why samples are fewer or poorer than asked, in file order
    reasons: List[str] = field(default_factory=list)
    #: the file ends with an end record (a normal exit)
    complete: bool = False
    warnings: List[str] = field(default_factory=list)
    # one element per sample
    ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # CLOCK_MONOTONIC
    tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    stack: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # index into stacks
    flags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    weight: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    task_domain: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    task_name: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    autoitt_domain: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    autoitt_name: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    #: per distinct stack, outermost first: recorded native addresses (the last is the interrupted
    #: instruction, the others return addresses) and Python frames (code id, line, is_entry)
    native_stacks: List[Tuple[int, ...]] = field(default_factory=list)
    python_stacks: List[Tuple[Tuple[int, Optional[int], bool], ...]] = field(default_factory=list)
    codes: Dict[int, Code] = field(default_factory=dict)
    #: every snapshot of the executable mappings, oldest first
    maps: List[List[Mapping]] = field(default_factory=list)
    thread_names: Dict[int, str] = field(default_factory=dict)
    counts: Dict[int, ThreadCounts] = field(default_factory=dict)
    #: ``_PyEval_EvalFrameDefault``'s code, as [start, end) ranges: its symbol's, then its cold part's
    eval_ranges: Tuple[Tuple[int, int], ...] = ()
    _merged: Optional[List[Tuple[Frame, ...]]] = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.ns)

    @property
    def reason(self) -> Optional[str]:
        """Why sampling was unavailable or degraded (the last reason recorded), or None."""
        return self.reasons[-1] if self.reasons else None

    @property
    def paused(self) -> np.ndarray:
        """Per sample: collection was paused (or detached) when it was taken."""
        return (self.flags & (F_PAUSED | F_DETACHED)) != 0

    @property
    def inherited(self) -> np.ndarray:
        """Per sample: the autoitt task is the process's, the thread had none of its own."""
        return (self.flags & F_INHERITED) != 0

    @property
    def dropped(self) -> int:
        return sum(c.dropped for c in self.counts.values())

    @property
    def lost(self) -> int:  # perf: samples lost while the program had replaced the handler
        return sum(c.lost for c in self.counts.values())

    def mapping(self, address: int) -> Optional[Mapping]:
        """The executable mapping holding ``address``: the latest snapshot that has one."""
        for snapshot in reversed(self.maps):
            starts = [m.start for m in snapshot]
            i = bisect.bisect_right(starts, address) - 1
            if i >= 0 and address < snapshot[i].end:
                return snapshot[i]
        return None

    def is_interpreter(self, address: int) -> bool:
        """Whether ``address`` is in the file holding ``_PyEval_EvalFrameDefault`` (libpython, or python)."""
        if not self.eval_ranges:
            return False
        here, interpreter = self.mapping(address), self.mapping(self.eval_ranges[0][0])
        return here is not None and interpreter is not None and here.path == interpreter.path

    @property
    def stacks(self) -> List[Tuple[Frame, ...]]:
        """Each distinct stack, its native and Python frames interleaved (:func:`merge_frames`), outermost
        first; native frames as lookup addresses (the call instruction's, the interrupted one's)."""
        if self._merged is None:
            ranges = self.eval_ranges
            interpreter_cache: Dict[int, bool] = {}

            def is_interpreter(address: int) -> bool:
                found = interpreter_cache.get(address)
                if found is None:
                    found = interpreter_cache[address] = self.is_interpreter(address)
                return found

            self._merged = [merge_frames(native, python, lambda a: any(s <= a < e for s, e in ranges), is_interpreter)
                            for native, python in zip(self.native_stacks, self.python_stacks)]
        return self._merged

    def frame_text(self, frame: Frame) -> str:
        """A Python frame as ``qualname (file:line)``; a native one as its address."""
        if frame[0] != "py":
            return f"{frame[1]:#x}" if frame[0] == "native" else "[frames of a deep stack left out]"
        code = self.codes.get(frame[1])
        return f"<code {frame[1]}>" if code is None else f"{code.qualname} ({os.path.basename(code.filename)}:{frame[2]})"


def read_sample_file(path: Union[str, Path]) -> SampleFile:
    """Reads one ``samples-<pid>.bin``.  A file cut short is read up to its last complete record
    (:attr:`SampleFile.warnings` says so); a file without a valid header raises :class:`SampleFormatError`."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _HEADER.size:
            raise SampleFormatError(f"{path}: {size} bytes, shorter than a samples header ({_HEADER.size})")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _read(path, data)
    finally:
        data.close()


def _read(path: Path, data: mmap.mmap) -> SampleFile:
    magic, version, header_size, pid, ppid, flags, _zero, ticks0, mono0 = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise SampleFormatError(f"{path}: not an autoitt samples file (magic {magic!r})")
    if version != VERSION:
        raise SampleFormatError(f"{path}: samples format version {version}, this reader knows {VERSION}")
    if header_size < _HEADER.size:
        raise SampleFormatError(f"{path}: bad header size {header_size}")
    out = SampleFile(path=path, pid=pid, ppid=ppid, forked=bool(flags & HEADER_FORKED))
    clock = Clock(ticks0, mono0, bool(flags & HEADER_TSC))
    batches: List[np.ndarray] = []
    raw: List[np.ndarray] = []
    stacks_by_id: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    maps: Dict[int, List[str]] = {}
    counts: Dict[Tuple[int, int], Tuple[int, int, int]] = {}
    lost: Dict[Tuple[int, int], int] = {}
    pos, size = header_size, len(data)
    mv = memoryview(data)
    try:
        while pos + _RECORD.size <= size:
            kind, length = _RECORD.unpack_from(data, pos)
            end = pos + _RECORD.size + length
            if end > size:
                out.warnings.append(f"{path.name}: cut short in a record at byte {pos}; read up to there")
                break
            p = pos + _RECORD.size
            if kind == R_SAMPLES:
                batches.append(np.frombuffer(mv[p:p + length - length % SAMPLE.itemsize], SAMPLE).copy())
            elif kind == R_STACK:
                stack_id, counts_word = _STACK_HEAD.unpack_from(data, p)
                n_native, n_py, cut = stack_counts(counts_word)
                q = p + _STACK_HEAD.size
                words = np.frombuffer(mv[q:q + 8 * (n_native + n_py)], "<u8")
                stacks_by_id[stack_id] = (words[:n_native].copy(), words[n_native:].copy(), cut)
            elif kind == R_CLOCK:
                clock.add(*_CLOCK.unpack_from(data, p))
            elif kind == R_CODE:
                code_id, first, fn_len, qn_len, lt_len, _ = _CODE.unpack_from(data, p)
                q = p + _CODE.size
                out.codes[code_id] = Code(filename=bytes(data[q:q + fn_len]).decode("utf-8", "replace"),
                                          qualname=bytes(data[q + fn_len:q + fn_len + qn_len]).decode("utf-8", "replace"),
                                          firstlineno=first,
                                          linetable=bytes(data[q + fn_len + qn_len:q + fn_len + qn_len + lt_len]))
            elif kind == R_RAW_SAMPLE:  # its stack gets an id past the collector's (they count up from 1)
                raw.append(np.frombuffer(mv[p:p + SAMPLE.itemsize], SAMPLE).copy())
                raw[-1]["stack"] = 1 << 31 | len(raw)
                counts_word, _ = _RAW_TAIL.unpack_from(data, p + SAMPLE.itemsize)
                n_native, n_py, cut = stack_counts(counts_word)
                words = np.frombuffer(mv[p + SAMPLE.itemsize + _RAW_TAIL.size:end], "<u8")[:n_native + n_py]
                stacks_by_id[1 << 31 | len(raw)] = (words[:n_native].copy(), words[n_native:].copy(), cut)
            elif kind == R_INFO:
                (hz, mechanism, sig, python, period, eval_start, eval_size, py_version, _mn, _mp,
                 _ring, cold_start, cold_size) = _INFO.unpack_from(data, p)
                out.rate_hz, out.period_ns, out.signal = hz, period, sig
                out.mechanism = MECHANISMS.get(mechanism, str(mechanism))
                out.python = PYTHON.get(python, str(python))
                out.python_version = (py_version >> 24, (py_version >> 16) & 0xFF) if py_version else None
                out.eval_ranges = tuple((a, a + n) for a, n in ((eval_start, eval_size), (cold_start, cold_size)) if a and n)
            elif kind == R_REASON:
                out.reasons.append(bytes(data[p:p + length]).decode("utf-8", "replace"))
            elif kind == R_THREAD:
                tid, _ = _THREAD_HEAD.unpack_from(data, p)
                out.thread_names[tid] = bytes(data[p + _THREAD_HEAD.size:p + length]).decode("utf-8", "replace")
            elif kind == R_MAPS:
                seq, _last = _MAPS_HEAD.unpack_from(data, p)
                maps.setdefault(seq, []).append(bytes(data[p + _MAPS_HEAD.size:p + length]).decode("utf-8", "replace"))
            elif kind == R_STATS:
                tid, serial, taken, dropped, handler_ticks = _STATS.unpack_from(data, p)
                counts[(tid, serial)] = (taken, dropped, handler_ticks)
            elif kind == R_LOST:
                tid, serial, samples = _LOST.unpack_from(data, p)
                lost[(tid, serial)] = samples
            elif kind == R_END:
                out.complete = True
            pos = end + (-length % 8)
        else:
            if pos != size:
                out.warnings.append(f"{path.name}: {size - pos} stray bytes at the end")
    finally:
        mv.release()

    # the map snapshots
    for seq in sorted(maps):
        out.maps.append(parse_maps("".join(maps[seq])))

    # the stacks, interned by content (lines, not instructions: samples on one line share a stack)
    index_of: Dict[Tuple, int] = {}
    ids, dense = np.array(sorted(stacks_by_id), np.int64), []
    for stack_id in ids.tolist():
        native, python, cut = stacks_by_id[stack_id]
        key = (tuple(reversed(native.tolist())), python_frames(python, out.codes, cut))
        if key not in index_of:
            index_of[key] = len(out.native_stacks)
            out.native_stacks.append(key[0])
            out.python_stacks.append(key[1])
        dense.append(index_of[key])
    entries = np.concatenate(batches + raw) if batches or raw else np.zeros(0, SAMPLE)
    where = np.searchsorted(ids, entries["stack"].astype(np.int64)).clip(0, max(len(ids) - 1, 0))
    found = (ids[where] == entries["stack"]) if len(ids) else np.zeros(len(entries), bool)
    stack = np.where(found, np.asarray(dense + [-1], np.int32)[where if len(ids) else -1], -1).astype(np.int32)
    missing = int((stack < 0).sum())
    if missing:
        out.warnings.append(f"{path.name}: {missing} samples name a stack the file does not hold")
    out.ns = clock.to_ns(entries["ticks"].copy()) if len(entries) else np.zeros(0, np.uint64)
    out.tid = entries["tid"].copy()
    out.stack = stack
    out.flags = entries["flags"].copy()
    out.weight = entries["weight"].copy()
    for name in ("task_domain", "task_name", "autoitt_domain", "autoitt_name"):
        setattr(out, name, entries[name].copy())
    tsc = clock.tsc and len(clock.ticks) > 1 and clock.ticks[-1] > clock.ticks[0]
    ns_per_tick = (clock.mono[-1] - clock.mono[0]) / (clock.ticks[-1] - clock.ticks[0]) if tsc else 1.0
    for (tid, serial), (taken, dropped, handler_ticks) in counts.items():
        c = out.counts.setdefault(tid, ThreadCounts())
        c.samples += taken
        c.dropped += dropped
        c.handler_ns += int(handler_ticks * ns_per_tick)
        c.lost += lost.get((tid, serial), 0)
    return out


def read_sample_dir(directory: Union[str, Path]) -> List[SampleFile]:
    """Every ``samples-*.bin`` in ``directory``, by pid; files without a valid header are skipped."""
    found = []
    for path in sorted(Path(directory).glob("samples-*.bin")):
        try:
            found.append(read_sample_file(path))
        except (SampleFormatError, OSError, ValueError):
            continue
    return sorted(found, key=lambda s: s.pid)
