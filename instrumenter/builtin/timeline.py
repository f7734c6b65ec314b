"""Which tasks ``trace.json`` keeps: all of autoitt's (and the script's own), and the rest in a window of steps.

With ``emit_itt`` every PyTorch operator and oneDNN primitive is a task: a
long run's full timeline is more than a viewer can load. The statistics are
computed from every task; the timeline keeps every task of the run's own
domains (loops, epochs, steps, evals: few) and, of the others, those of a
window of steps (``--trace-steps``):

* ``auto`` (the default): everything when the run has at most
  :data:`AUTO_ALL_TASKS` tasks; otherwise steps 2-11 (past warm-up) and the
  last 10;
* ``all``: everything;
* ``A-B,C,-N``: steps A to B, step C, the last N steps (1-based, counted per
  process in the order they began, over every step label).

A task is in the window when it overlaps one of the window's steps in its own
process (intra-op threads and DataLoader-free work included).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

#: Up to this many tasks, ``auto`` keeps the whole timeline.
AUTO_ALL_TASKS = 1_000_000
#: ``auto`` past that: these steps (1-based ranges) and the last ones.
AUTO_RANGES = ((2, 11),)
AUTO_LAST = 10


@dataclass(frozen=True)
class StepWindow:
    """A parsed ``--trace-steps``: ``everything``, or ranges of steps and a count of last steps."""

    everything: bool = False
    ranges: Tuple[Tuple[int, int], ...] = ()
    last: int = 0
    automatic: bool = False

    @classmethod
    def parse(cls, text: str) -> "StepWindow":
        """``auto``, ``all`` or ``A-B,C,-N``; ``ValueError`` naming what is wrong."""
        text = text.strip()
        if text == "auto":
            return cls(ranges=AUTO_RANGES, last=AUTO_LAST, automatic=True)
        if text == "all":
            return cls(everything=True)
        ranges, last = [], 0
        for part in (p.strip() for p in text.split(",")):
            first, dash, second = part.partition("-")
            if not first and dash and second.isdigit() and int(second) > 0:
                last = max(last, int(second))
            elif first.isdigit() and int(first) > 0 and (not dash or second.isdigit() and int(second) >= int(first)):
                ranges.append((int(first), int(second) if dash else int(first)))
            else:
                raise ValueError(f"{part!r}: expected A-B (steps A to B), A (one step) or -N (the last N steps)")
        return cls(ranges=tuple(ranges), last=last)

    def chosen(self, count: int) -> List[int]:
        """The 0-based indices of the chosen steps among ``count``."""
        picked: Set[int] = {i for first, last in self.ranges for i in range(first - 1, min(last, count))}
        picked.update(range(max(count - self.last, 0), count))
        return sorted(picked)


def window(items: Sequence, step_labels: Iterable[str], domains: Iterable[str],
           steps: StepWindow) -> Tuple[List, Optional[str]]:
    """The tasks ``trace.json`` keeps and, when some were left out, a sentence saying what it holds."""
    own = set(domains)
    labels = set(step_labels)
    if steps.everything or (steps.automatic and len(items) <= AUTO_ALL_TASKS):
        return list(items), None
    by_pid: Dict[int, List] = {}
    for item in items:
        if item.domain in own and item.name in labels:
            by_pid.setdefault(item.pid, []).append(item)
    spans: Dict[int, Tuple[List[int], List[int]]] = {}
    counts: List[int] = []
    for pid, found in by_pid.items():
        found.sort(key=lambda item: item.start)
        chosen = [found[i] for i in steps.chosen(len(found))]
        spans[pid] = _merged((s.start, s.end) for s in chosen)
        counts.append(len(found))
    kept = [item for item in items if item.domain in own or _overlaps(spans.get(item.pid), item.start, item.end)]
    if len(kept) == len(items):
        return kept, None
    return kept, _describe(steps, max(counts, default=0), len(items) - len(kept))


def _merged(spans: Iterable[Tuple[int, int]]) -> Tuple[List[int], List[int]]:
    """Sorted, non-overlapping spans, as (starts, ends) for bisecting."""
    starts: List[int] = []
    ends: List[int] = []
    for start, end in sorted(spans):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _overlaps(spans: Optional[Tuple[List[int], List[int]]], start: int, end: int) -> bool:
    if not spans:
        return False
    starts, ends = spans
    # the last span starting at or before the task's end is the only one that can overlap it
    index = bisect.bisect_right(starts, end) - 1
    return index >= 0 and ends[index] >= start


def _describe(steps: StepWindow, count: int, dropped: int) -> str:
    parts = [f"{a}-{min(b, count)}" if b > a else str(a) for a, b in steps.ranges if a <= count]
    if steps.last:
        parts.append(f"the last {min(steps.last, count)}")
    held = ", ".join(parts) if parts else "none"
    return (f"trace.json holds every task of the run's own markers, and the others (operators, primitives) only "
            f"for steps {held} of {count}: {dropped} tasks left out (--trace-steps all keeps them)")
