"""The Python side of CPU-time samples (:mod:`.samplefile`): lines, and Python frames among native ones.

* :class:`Code`: a code object as a samples file describes it; its lines come
  from CPython's location table (``co_linetable``, the same from 3.11 to 3.15, format in CPython's
  ``Objects/locations.md``), decoded here as ``code.co_lines()`` would
  (:func:`line_ranges`), so samples record only (code object, instruction).
* :func:`merge_frames`: one sample's native frames (from the thread's start to
  the interrupted instruction) and Python frames, interleaved where each
  Python frame ran.
* :class:`Mapping`: an executable mapping of the process (:func:`parse_maps`
  reads ``/proc/<pid>/maps`` text), for naming native frames (:mod:`.symbols`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ...collector import formats

__all__ = ["CUT", "CUT_CODE", "Code", "Frame", "Mapping", "line_ranges", "merge_frames", "parse_maps",
           "python_frames", "stack_counts"]

#: A frame of a merged stack: ``("py", code_id, line)`` (line None: no location), ``("native", address)``, or
#: :data:`CUT`.
Frame = Union[Tuple[str, int, Optional[int]], Tuple[str, int]]
#: Where the collector cut the middle of a deep Python stack (formats.PYTHON_WALK's CUT): in a stack's Python
#: frames, ``(CUT_CODE, None, False)``; in a merged stack, CUT.
CUT_CODE = -1
CUT: Frame = ("cut", 0)


@dataclass(frozen=True)
class Code:
    """A Python code object seen in samples."""

    filename: str
    qualname: str
    firstlineno: int
    linetable: bytes = field(repr=False)

    def line(self, lasti: int) -> Optional[int]:
        """The source line of the instruction at ``lasti`` (2-byte code units; -1: the function's first line)."""
        if lasti < 0:
            return self.firstlineno
        ranges = self.__dict__.get("_ranges")
        if ranges is None:
            table = line_ranges(self.linetable, self.firstlineno)
            ranges = ([r[0] for r in table], [r[1] for r in table], [r[2] for r in table])
            object.__setattr__(self, "_ranges", ranges)
        i = bisect.bisect_right(ranges[0], 2 * lasti) - 1
        if i < 0 or 2 * lasti >= ranges[1][i]:
            return None
        return ranges[2][i]


def line_ranges(linetable: bytes, firstlineno: int) -> List[Tuple[int, int, Optional[int]]]:
    """CPython's location table (3.11 to 3.15) as ``(start, end, line)`` byte ranges (what ``code.co_lines()`` gives,
    unmerged), following ``Objects/locations.md``."""
    out: List[Tuple[int, int, Optional[int]]] = []
    line, addr, i, n = firstlineno, 0, 0, len(linetable)

    def varint(i: int) -> Tuple[int, int]:
        b = linetable[i]
        i += 1
        value, shift = b & 63, 0
        while b & 64:
            b = linetable[i]
            i += 1
            shift += 6
            value |= (b & 63) << shift
        return value, i

    while i < n:
        first = linetable[i]
        i += 1
        code, length = (first >> 3) & 15, (first & 7) + 1
        end = addr + 2 * length
        where: Optional[int] = line
        try:
            if code == 15:
                where = None
            elif code == 14:
                delta, i = varint(i)
                line += -(delta >> 1) if delta & 1 else delta >> 1
                for _ in range(3):
                    _unused, i = varint(i)
                where = line
            elif code == 13:
                delta, i = varint(i)
                line += -(delta >> 1) if delta & 1 else delta >> 1
                where = line
            elif code >= 10:
                line += code - 10
                i += 2
                where = line
            else:
                i += 1
        except IndexError:
            break
        out.append((addr, end, where))
        addr = end
    return out


def stack_counts(word: int) -> Tuple[int, int, bool]:
    """A stack's counts word as (native frames, Python frames, whether the Python walk cut its middle)."""
    n_native, low = divmod(word, 1 << formats.STACK_NATIVE_SHIFT)
    return n_native, low & ~formats.STACK_PY_CUT, bool(low & formats.STACK_PY_CUT)


def python_frames(words: np.ndarray, codes: Dict[int, Code],
                  cut: bool = False) -> Tuple[Tuple[int, Optional[int], bool], ...]:
    """A stack record's Python frames (``code_id << 32 | (lasti + 1) << 1 | is_entry`` each, innermost first)
    as (code id, line, is_entry), outermost first; ``cut``: the collector kept only the outermost
    ``PYTHON_OUTER_FRAMES`` and the innermost of a deeper stack, and ``(CUT_CODE, None, False)`` stands between."""
    out = []
    for word in reversed(words.tolist()):
        code_id, low = word >> 32, word & 0xFFFFFFFF
        code = codes.get(code_id)
        out.append((code_id, code.line((low >> 1) - 1) if code else None, bool(low & 1)))
    if cut and len(out) > formats.PYTHON_OUTER_FRAMES:
        out.insert(formats.PYTHON_OUTER_FRAMES, (CUT_CODE, None, False))
    return tuple(out)


def merge_frames(native: Sequence[int], python: Sequence[Tuple[int, Optional[int], bool]],
                 is_eval: Callable[[int], bool], is_interpreter: Callable[[int], bool]) -> Tuple[Frame, ...]:
    """One stack's native and Python frames interleaved, outermost first.

    ``native``: recorded addresses, outermost first (the last one the interrupted instruction, the others
    return addresses); ``python``: (code id, line, is_entry), outermost first.  ``is_eval(a)`` says whether the
    lookup address ``a`` is in ``_PyEval_EvalFrameDefault``, ``is_interpreter(a)`` whether it is in the
    interpreter's own library.

    CPython (3.11 and later) runs a Python-to-Python call in the same C call of ``_PyEval_EvalFrameDefault``; a
    frame that began such a C call is flagged ``is_entry`` (from 3.12 the collector sets the flag where a shim
    frame marks the entry).  So the Python frames split into runs, each from an
    entry frame to the frame before the next one, and run k (counted from the innermost) replaces the k-th
    ``_PyEval_EvalFrameDefault`` frame (from the innermost).  Runs left over (the native walk stopped before
    the outermost entries) go first; ``_PyEval_EvalFrameDefault`` frames left over are dropped.  The
    interpreter's other frames are dropped too, except the innermost ones below the last Python frame with
    nothing but interpreter frames under them (what that Python line was doing: a dict lookup, an integer
    addition).  Native frames are given as lookup addresses: the return address minus one (in the call
    instruction), the interrupted instruction's own address for the innermost.

    Where the collector cut the middle of the Python frames (a ``CUT_CODE`` frame), the outermost ones come
    first, then :data:`CUT`, then the innermost merged with the native frames as above; native frames outside
    the outermost ``_PyEval_EvalFrameDefault`` they replace ran in the part cut, and are left out.
    """
    cut = next((i for i, frame in enumerate(python) if frame[0] == CUT_CODE), None)
    if cut is not None:
        outer: Tuple[Frame, ...] = tuple(("py", code_id, line) for code_id, line, _entry in python[:cut])
        return outer + (CUT,) + _merged(native, python[cut + 1:], is_eval, is_interpreter, inside_cut=True)
    return _merged(native, python, is_eval, is_interpreter, inside_cut=False)


def _merged(native: Sequence[int], python: Sequence[Tuple[int, Optional[int], bool]],
            is_eval: Callable[[int], bool], is_interpreter: Callable[[int], bool],
            inside_cut: bool) -> Tuple[Frame, ...]:
    """:func:`merge_frames` of Python frames with no cut; ``inside_cut``: they are the innermost of a cut stack."""
    lookup = [a - 1 for a in native[:-1]] + list(native[-1:])
    runs: List[List[Frame]] = []
    for code_id, line, entry in python:
        if entry or not runs:
            runs.append([])
        runs[-1].append(("py", code_id, line))
    evals = [i for i, a in enumerate(lookup) if is_eval(a)]
    matched: Dict[int, List[Frame]] = {}
    k = 0
    for k in range(1, min(len(runs), len(evals)) + 1):
        matched[evals[-k]] = runs[-k]
    left = runs[: len(runs) - len(matched)]
    interp = [is_interpreter(a) for a in lookup]
    # interpreter frames kept: the trailing run of them, when no Python frame is replaced after it
    keep_from = len(lookup)
    while keep_from > 0 and interp[keep_from - 1] and (keep_from - 1) not in matched:
        keep_from -= 1
    out: List[Frame] = [frame for run in left for frame in run]
    # in a cut stack whose runs all found their evaluator frame, native frames outside the outermost ran in the
    # part cut; where runs are left over (the native walk stopped short), they ran between those runs: kept
    outermost = min(matched) if inside_cut and matched and not left else 0
    for i, address in enumerate(lookup):
        if i < outermost:
            continue
        if i in matched:
            out.extend(matched[i])
        elif interp[i] and (i < keep_from or is_eval(address)):
            continue
        else:
            out.append(("native", address))
    return tuple(out)


@dataclass(frozen=True)
class Mapping:
    """An executable mapping of the process: ``[start, end)`` maps ``path`` from file offset ``offset``."""

    start: int
    end: int
    offset: int
    path: str


def parse_maps(text: str) -> List[Mapping]:
    """The executable mappings of ``/proc/<pid>/maps`` text (lines ``start-end perms offset dev inode path``),
    by address."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or "x" not in parts[1]:
            continue
        start, _, stop = parts[0].partition("-")
        try:
            out.append(Mapping(int(start, 16), int(stop, 16), int(parts[2], 16),
                               parts[5].strip() if len(parts) > 5 else ""))
        except ValueError:
            continue
    return sorted(out, key=lambda m: m.start)
