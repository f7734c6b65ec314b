"""Lines of the instrumented copy -> lines of the original script.

Profilers see the copy (VTune reports ``train_itt.py:57``), the user knows the
original (``train.py:42``). A rewrite only inserts marker lines and
re-indents the loops it wraps, so, as in :func:`instrumenter.diff.marker_diff`,
the two files are compared line by line with indentation ignored: every
original line appears in the copy, in order.

A copy line that is an original line maps to it. An inserted marker maps to
the nearest following original line (``itt.task_begin`` before a loop body
belongs to the body's first line), except the markers that close a region
(``finally: itt.task_end(...)`` after a loop), which map to the region's own
line (the ``for``), and markers after the last original line, which map to
the last one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class LineMap:
    """``original[copy_line - 1]`` is the original line of a copy line (1-based)."""

    original: Tuple[int, ...]
    #: Every original line was found in the copy. False when the script was
    #: edited after it was profiled; lines shown are then approximate.
    complete: bool

    def original_line(self, copy_line: int) -> Optional[int]:
        if 1 <= copy_line <= len(self.original):
            return self.original[copy_line - 1]
        return None


def build(original: str, copy: str, regions: Iterable[Tuple[int, int]] = ()) -> LineMap:
    """Map ``copy`` onto ``original``; ``regions`` are the (line, end_line) of the original's marked regions."""
    before = [line.strip() for line in original.splitlines()]
    after = [line.strip() for line in copy.splitlines()]
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    mapped: List[Optional[int]] = [None] * len(after)
    matched = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            matched += i2 - i1
            for offset in range(j2 - j1):
                mapped[j1 + offset] = i1 + offset + 1
        elif tag == "replace":
            # A rewrite never changes an original line; if one did (or the script
            # changed since), spread the copy's lines over the original's.
            for offset in range(j2 - j1):
                mapped[j1 + offset] = min(i1 + offset, i2 - 1) + 1
    return LineMap(tuple(_fill_inserted(mapped, list(regions))), complete=matched == len(before))


def _fill_inserted(mapped: List[Optional[int]], regions: Sequence[Tuple[int, int]]) -> List[int]:
    result = list(mapped)
    j = 0
    while j < len(result):
        if result[j] is not None:
            j += 1
            continue
        end = j
        while end < len(result) and result[end] is None:
            end += 1
        previous = result[j - 1] if j else None
        following = result[end] if end < len(result) else None
        target = following if following is not None else (previous or 1)
        if previous is not None:
            closed = _closing_region(previous, following, regions)
            if closed is not None:
                target = closed
        for k in range(j, end):
            result[k] = target
        j = end
    return [line if line is not None else 1 for line in result]


def _closing_region(previous: int, following: Optional[int], regions: Sequence[Tuple[int, int]]) -> Optional[int]:
    """The innermost region that ends between ``previous`` and ``following``: the markers close it."""
    closing = [(line, end) for line, end in regions
               if line <= previous <= end and (following is None or following > end)]
    return max(closing)[0] if closing else None
