"""The reader's inner loop, in C (``pairing.c``, built into ``instrumenter/builtin/trace/_pairing*.so``), bound with ctypes.

One :class:`Thread` per traced thread carries its open tasks from block to
block; :func:`pair` pairs one block of its records and counts each closed
instance into per-task arrays (:class:`Counts`), returning the instances as
arrays, in the order they closed.
"""

from __future__ import annotations

import ctypes
import importlib.util
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ...collector import formats

_I64 = ctypes.POINTER(ctypes.c_int64)
_U8 = ctypes.POINTER(ctypes.c_uint8)
#: Open tasks a thread may nest; deeper ones are paired (their ends dropped in order) but not counted.
DEPTH = 4096


class _Stack(ctypes.Structure):
    _fields_ = [("ids", _I64), ("starts", _I64), ("child", _I64), ("library_child", _I64), ("depth", ctypes.c_int64),
                ("capacity", ctypes.c_int64), ("deep", ctypes.c_int64)]


class _Stats(ctypes.Structure):
    _fields_ = [("count", _I64), ("sum", _I64), ("inside", _I64), ("self", _I64), ("min", _I64), ("max", _I64),
                ("histogram", _I64), ("self_library", _I64), ("library", _U8), ("buckets", ctypes.c_int64),
                ("log_ratio", ctypes.c_double)]


class _Rows(ctypes.Structure):
    _fields_ = [("ids", _I64), ("starts", _I64), ("ends", _I64), ("self", _I64), ("depth", _I64),
                ("outermost", _U8), ("finished", _U8)]


def _library() -> ctypes.CDLL:
    spec = importlib.util.find_spec("instrumenter.builtin.trace._pairing")
    if spec is None or not spec.origin:
        raise RuntimeError("autoitt's trace reader library (instrumenter/builtin/trace/_pairing*.so) is missing: reinstall "
                           "autoitt (pip install .), with a C compiler present")
    library = ctypes.CDLL(spec.origin)
    _I32 = ctypes.POINTER(ctypes.c_int32)
    library.autoitt_pair.restype = ctypes.c_int64
    library.autoitt_pair.argtypes = [ctypes.c_int64, ctypes.c_void_p, _I64, ctypes.POINTER(_Stack), _I32,
                                     ctypes.POINTER(_Stats), ctypes.POINTER(_Rows), _I64, _I64]
    library.autoitt_close.restype = ctypes.c_int64
    library.autoitt_close.argtypes = [ctypes.c_int64, ctypes.POINTER(_Stack), _I32, ctypes.POINTER(_Stats),
                                      ctypes.POINTER(_Rows), _I64]
    sizes = (ctypes.c_int64 * 4)()
    library.autoitt_pairing_sizes.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.autoitt_pairing_sizes(sizes)
    mirrored = (ctypes.sizeof(_Stack), ctypes.sizeof(_Stats), ctypes.sizeof(_Rows), formats.RECORD.size)
    if tuple(sizes) != mirrored:  # a library built from other sources than these: it would write past the mirrors
        raise RuntimeError(f"autoitt's trace reader library ({spec.origin}) does not match its Python side "
                           f"(struct sizes {tuple(sizes)} against {mirrored}): reinstall autoitt (pip install .)")
    return library


_LIB: Optional[ctypes.CDLL] = None


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        _LIB = _library()
    return _LIB


def _p(array: np.ndarray, kind=_I64):
    return array.ctypes.data_as(kind)


@dataclass
class Counts:
    """Per task id: count, summed duration, time inside (outermost instances), self time, min, max (ns),
    a histogram of durations (``buckets`` per id, bucket of ``d``: ``floor(log(d) / log_ratio) + 1``), and
    self time with the child tasks of a library counted in (``library``: per id, whether it is a library's
    task: a oneDNN primitive is its calling operator's implementation)."""

    count: np.ndarray
    sum: np.ndarray
    inside: np.ndarray
    self: np.ndarray
    min: np.ndarray
    max: np.ndarray
    histogram: np.ndarray
    self_library: np.ndarray
    library: np.ndarray  # uint8
    log_ratio: float

    def _struct(self) -> _Stats:
        return _Stats(_p(self.count), _p(self.sum), _p(self.inside), _p(self.self), _p(self.min), _p(self.max),
                      _p(self.histogram), _p(self.self_library), _p(self.library, _U8),
                      self.histogram.shape[1], self.log_ratio)


class Thread:
    """One thread's open tasks (bottom to top), and how many instances of each task are open."""

    def __init__(self, ids: int) -> None:
        self.ids = np.zeros(DEPTH, np.int64)
        self.starts = np.zeros(DEPTH, np.int64)
        self.child = np.zeros(DEPTH, np.int64)
        self.library_child = np.zeros(DEPTH, np.int64)
        self.stack = _Stack(_p(self.ids), _p(self.starts), _p(self.child), _p(self.library_child), 0, DEPTH, 0)
        self.open_count = np.zeros(max(ids, 64), np.int32)
        self.rows = _rows(0)  # room for the rows of a block, reused block after block

    def fit(self, ids: int) -> None:
        if ids > len(self.open_count):
            bigger = np.zeros(2 * ids, np.int32)
            bigger[:len(self.open_count)] = self.open_count
            self.open_count = bigger


Rows = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _room(thread: Thread, n: int):
    """``thread``'s rows buffers, for at least ``n`` rows (reused: a fresh 20 MB a block costs page faults)."""
    if len(thread.rows[0][0]) < n:
        thread.rows = _rows(max(n, 2 * len(thread.rows[0][0])))
    return thread.rows


def _rows(n: int):
    arrays = [np.empty(n, np.int64) for _ in range(5)] + [np.empty(n, np.uint8) for _ in range(2)]
    return arrays, _Rows(*(_p(a) for a in arrays[:5]), _p(arrays[5], _U8), _p(arrays[6], _U8))


def _done(arrays, rows: int) -> Rows:
    ids, starts, ends, selfs, depths, outermost, finished = (a[:rows] for a in arrays)
    return ids, starts, ends, selfs, depths, outermost.view(np.bool_), finished.view(np.bool_)


def pair(thread: Thread, records: np.ndarray, ids: np.ndarray, counts: Counts) -> Tuple[Rows, int, int]:
    """Pairs one block of a thread's records (:data:`~.tracefile.RECORD`, begins and ends; ``ids``: each
    begin's task id) after its open tasks; counts each closed instance into ``counts``. Returns (ids,
    starts, ends, self times, depths, outermost, finished) in closing order (views of the thread's buffers,
    valid until its next call), the thread time added (instances at depth 0) and the ends flagged
    unfinished."""
    records = np.ascontiguousarray(records)
    n = len(records)
    arrays, out = _room(thread, n)
    thread_time, unfinished = ctypes.c_int64(0), ctypes.c_int64(0)
    stats = counts._struct()
    rows = _lib().autoitt_pair(
        ctypes.c_int64(n), records.ctypes.data_as(ctypes.c_void_p), _p(ids), ctypes.byref(thread.stack),
        thread.open_count.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), ctypes.byref(stats), ctypes.byref(out),
        ctypes.byref(thread_time), ctypes.byref(unfinished))
    return _done(arrays, rows), thread_time.value, unfinished.value


def close(thread: Thread, end: int, counts: Counts) -> Tuple[Rows, int]:
    """Ends the thread's open tasks at ``end``, unfinished; counted like :func:`pair`'s."""
    arrays, out = _rows(max(thread.stack.depth, 1))
    thread_time = ctypes.c_int64(0)
    stats = counts._struct()
    rows = _lib().autoitt_close(ctypes.c_int64(end), ctypes.byref(thread.stack),
                                thread.open_count.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                ctypes.byref(stats), ctypes.byref(out), ctypes.byref(thread_time))
    return _done(arrays, rows), thread_time.value
