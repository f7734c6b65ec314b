"""Hotspots: sampled CPU time per function, over the run and per task, from resolved stacks.

Input is what :mod:`.stacks` makes of the collector's samples: a table of
unique stacks (tuples of :class:`Frame`, outermost first: Python frames on
the script's own lines, native frames by library and symbol) and, per
sample, its stack and the task it belongs to. Each sample stands for one
sampling period of its thread's CPU time. A function's self time is the
samples with it as the leaf; its total time is the samples with it anywhere
in the stack (counted once per sample, however deep the recursion).

Output: :class:`~instrumenter.builtin.statistics.summary.Hotspot` rows, and folded stacks
(``frame;frame;frame count`` lines, the format flame-graph tools and
speedscope read).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..statistics.summary import Hotspot

#: Rows of each hotspot list kept in the summary.
TOP = 15


@dataclass(frozen=True)
class Frame:
    """One frame of a stack: a Python function at a line of a file, or a native function in a library."""

    function: str
    file: Optional[str] = None      # Python: the (original) file
    line: Optional[int] = None      # Python: the line executing
    library: Optional[str] = None   # native: the library's file name (libtorch_cpu.so, [anon] for JIT code)
    #: a line of the profiled project's own files (the script, its local modules)
    own: bool = False

    def label(self) -> str:
        """As a flame graph shows it: ``train (train.py:43)``, ``at::native::add [libtorch_cpu.so]``."""
        if self.file is not None:
            return f"{self.function} ({self.file}:{self.line})"
        return f"{self.function} [{self.library}]" if self.library else self.function


def tally(stacks: Sequence[Tuple[Frame, ...]], counts: Iterable[Tuple[int, int]]) -> Tuple[Counter, Counter, int]:
    """Self and total samples per frame (a Python frame per line, a native one per function) from
    ``(stack index, samples)`` pairs; and the samples in all."""
    self_count: Counter = Counter()
    total_count: Counter = Counter()
    samples = 0
    for stack, count in counts:
        frames = stacks[stack]
        samples += count
        if not frames:
            continue
        self_count[frames[-1]] += count
        for frame in set(frames):
            total_count[frame] += count
    return self_count, total_count, samples


def top(stacks: Sequence[Tuple[Frame, ...]], counts: Iterable[Tuple[int, int]], period_s: float,
        limit: int = TOP) -> List[Hotspot]:
    """The ``limit`` functions with the most self time (then total), as summary rows; shares are of the
    samples counted. The instances of one C++ template are one row (:func:`family`), their full names in
    ``instances``. Frames in every sample with no time of their own (``_start``, ``main``, the
    interpreter's entry) say nothing and are left out."""
    grouped, instances = _families(stacks)
    self_count, total_count, samples = tally(grouped, counts)
    telling = [f for f in total_count if self_count[f] or total_count[f] < samples]
    ranked = sorted(telling, key=lambda f: (-self_count[f], -total_count[f], f.label()))[:limit]
    return _rows(ranked, self_count, total_count, samples, period_s, instances)


_CLONE = re.compile(r"(?: \[clone [^\]]*\])+$")


def family(name: str) -> str:
    """A C++ function's name without its return type, parameters and template arguments (each ``<…>``): what
    the instances of one template share. Other names are returned as they are."""
    text = _CLONE.sub("", name.rstrip())  # a compiler's clone of a function ([clone .isra.0]) is that function
    if "<" not in text and "(" not in text:
        return text
    text = text.rstrip()
    if text.endswith(" const"):
        text = text[:-len(" const")]
    if text.endswith(")"):  # the parameters
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i] or text
                break
    elided, start = elide_templates(text), 0
    for i, char in enumerate(elided):  # the return type ends at the last space outside brackets
        if char == " " and elided[:i].count("(") == elided[:i].count(")"):
            start = i + 1
    return elided[start:] or name


def elide_templates(name: str) -> str:
    """``name`` with each outermost template argument list as ``<…>``."""
    out, depth = [], 0
    for char in name:
        if char == "<":
            depth += 1
            if depth == 1:
                out.append("<…")
        elif char == ">" and depth:
            depth -= 1
            if depth == 0:
                out.append(">")
        elif depth == 0:
            out.append(char)
    return "".join(out)


def _families(stacks: Sequence[Tuple[Frame, ...]]) -> Tuple[List[Tuple[Frame, ...]], dict]:
    """The stacks with each native frame replaced by its template's family (:func:`family`), and each family
    frame's full names where it has more than one."""
    mapped: dict = {}
    names: dict = {}
    for frames in stacks:
        for frame in frames:
            if frame not in mapped:
                if frame.library is None or frame.file is not None:
                    mapped[frame] = frame
                else:
                    grouped = Frame(family(frame.function), library=frame.library)
                    mapped[frame] = grouped
                    names.setdefault(grouped, set()).add(frame.function)
    grouped_stacks = [tuple(mapped[frame] for frame in frames) for frames in stacks]
    instances = {frame: tuple(sorted(full)) for frame, full in names.items()
                 if len(full) > 1 or next(iter(full)) != frame.function}
    return grouped_stacks, instances


def own_lines(stacks: Sequence[Tuple[Frame, ...]], counts: Iterable[Tuple[int, int]], period_s: float,
              limit: int = TOP, off_cpu: Iterable[Tuple[int, int]] = ()) -> List[Hotspot]:
    """The lines of the project's own files where the time is: each sample counts for the innermost of them
    on its stack (what that line runs inside libraries included), so the lines that cost come first, not the
    calls enclosing everything (``main()``, ``trainer.fit(...)``, at ~100 %: their ``total_s`` still says
    so). For people who can only change their own code. ``self_s`` and ``share``: that innermost time.
    ``off_cpu``: off-CPU samples, each counted the same way as ``off_cpu_s``; lines rank by CPU and off-CPU
    time together (the time the line cost the run's wall clock), so a line that waits is found."""
    counts = list(counts)
    _self_count, total_count, samples = tally(stacks, counts)
    innermost, waited = _innermost_own(stacks, counts), _innermost_own(stacks, off_cpu)
    candidates = {f for f in total_count if f.own} | set(waited)
    ranked = sorted(candidates, key=lambda f: (-(innermost[f] + waited[f]), -total_count[f], f.label()))[:limit]
    rows = _rows(ranked, innermost, total_count, samples, period_s)
    return [replace(row, off_cpu_s=waited[f] * period_s) if waited[f] else row for row, f in zip(rows, ranked)]


def _innermost_own(stacks: Sequence[Tuple[Frame, ...]], counts: Iterable[Tuple[int, int]]) -> Counter:
    """Samples per line of the user's: each for the innermost of them on its stack."""
    innermost: Counter = Counter()
    for stack, count in counts:
        inner = next((frame for frame in reversed(stacks[stack]) if frame.own), None)
        if inner is not None:
            innermost[inner] += count
    return innermost


def _rows(frames, self_count: Counter, total_count: Counter, samples: int, period_s: float,
          instances: Optional[dict] = None) -> List[Hotspot]:
    return [Hotspot(function=f.function, file=f.file, line=f.line, library=f.library,
                    self_s=self_count[f] * period_s, total_s=total_count[f] * period_s,
                    share=self_count[f] / samples if samples else 0.0,
                    instances=(instances or {}).get(f, ())) for f in frames]


def counts_of(stack_ids: np.ndarray, weights: np.ndarray) -> List[Tuple[int, int]]:
    """``(stack index, samples)`` for samples whose stacks are ``stack_ids``, each standing for ``weights`` periods."""
    if not len(stack_ids):
        return []
    unique, inverse = np.unique(stack_ids, return_inverse=True)
    return list(zip(unique.tolist(), np.bincount(inverse, weights=weights).astype(np.int64).tolist()))


def folded(stacks: Sequence[Tuple[Frame, ...]], counts: Iterable[Tuple[int, int]],
           prefix: Sequence[str] = ()) -> Iterator[str]:
    """Folded stack lines (``a;b;c 12``); ``;`` inside a frame's label becomes ``:``, as the format has no
    escape."""
    merged: Counter = Counter()
    for stack, count in counts:
        merged[";".join([*prefix, *(f.label().replace(";", ":") for f in stacks[stack])])] += count
    for line, count in sorted(merged.items()):
        if line:
            yield f"{line} {count}"
