"""Which tasks ``trace.json`` keeps: all of autoitt's (and the script's own), and the rest in a window of steps.

With ``emit_itt`` every PyTorch operator and oneDNN primitive is a task: a
long run's full timeline is more than a viewer can load. The statistics are
computed from every task; the timeline keeps every task of the run's own
domains (loops, epochs, steps, evals: few) and, of the others, those of a
window of steps (``--trace-steps``):

* ``auto`` (the default): everything when the run has at most
  :data:`AUTO_ALL_TASKS` tasks; otherwise steps 2-11 (past warm-up) and the
  last 10; and when the run's own tasks alone are more than that (millions
  of tiny steps), its steps too only in that window (its loops, epochs and
  evaluations all kept), so the file stays one a viewer loads (about 100
  bytes a task);
* ``all``: everything;
* ``A-B,C,-N``: steps A to B, step C, the last N steps (1-based, counted per
  process in the order they began, over every step label).

A task is in the window when it overlaps one of the window's steps in its own
process (intra-op threads and DataLoader-free work included). The statistics
pass keeps the own domains' tasks (and, for ``all`` or a short ``auto`` run,
everything); a window is found by a second pass over the traces, which keeps
only what overlaps the chosen steps: the memory held is the timeline's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from .aggregate import Aggregates, aggregate
from .intervals import Intervals, Keep, overlapping
from .scan import Scan

#: Up to this many tasks, ``auto`` keeps the whole timeline (about 100 MB of trace.json).
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


def timeline(first: Aggregates, rescan: Callable[[], Iterable[Scan]], step_labels: Iterable[str],
             domains: Iterable[str], steps: StepWindow) -> Tuple[Intervals, Optional[str]]:
    """The instances ``trace.json`` holds and, when some were left out, a sentence saying what it holds.

    ``first`` is the statistics pass, made with :func:`keep_policy`: when it kept everything, that is the
    timeline; otherwise the others (operators, primitives) that overlap the chosen steps are found by a
    second pass over ``rescan()``, made only if there are any.
    """
    own = set(domains)
    if first.kept_everything:
        return first.kept, None
    is_own = np.array([domain in own for domain, _ in first.groups], np.bool_)
    step_groups = [g for g, (domain, name) in enumerate(first.groups) if domain in own and name in step_labels]
    spans, count = _chosen_spans(first.kept, step_groups, steps)
    kept = first.kept
    steps_too = steps.automatic and len(kept) > AUTO_ALL_TASKS
    if steps_too:
        # millions of the run's own steps: those too only in the window (loops, epochs, evals all kept)
        chosen = ~np.isin(kept.group, step_groups)
        for pid, pid_spans in spans.items():
            if len(spans) == 1:
                chosen |= overlapping(pid_spans, kept.start, kept.end) & (kept.pid == pid)
                continue
            mine = kept.pid == pid
            chosen[mine] |= overlapping(pid_spans, kept.start[mine], kept.end[mine])
        kept = kept.take(chosen)
    parts = [kept]
    if int(first.count[~is_own].sum()) if len(is_own) else 0:
        second = aggregate(rescan(), own, Keep(spans=spans), statistics=False)
        # the second pass numbers tasks in its own order: name its instances in the first pass's numbers
        number = {name: index for index, name in enumerate(first.groups)}
        lut = np.array([number.get(name, -1) for name in second.groups], np.int64)
        not_own = np.array([domain not in own for domain, _ in second.groups], np.bool_)
        others = second.kept.take(not_own[second.kept.group]) if len(second.kept) else Intervals.empty()
        others.group = lut[others.group].astype(np.int32)
        parts.append(others)
    kept = Intervals.concat(parts)
    dropped = int(first.count.sum()) - len(kept)
    if not dropped:
        return kept, None
    return kept, _describe(steps, count, dropped, steps_too)


def keep_policy(steps: StepWindow) -> Keep:
    """What the statistics pass keeps besides the own domains: everything for ``all``, everything up to
    :data:`AUTO_ALL_TASKS` for ``auto``, nothing else for a chosen window (a second pass finds it)."""
    if steps.everything:
        return Keep(limit=None)
    return Keep(limit=AUTO_ALL_TASKS if steps.automatic else 0)


def _chosen_spans(kept: Intervals, step_groups: List[int],
                  steps: StepWindow) -> Tuple[Dict[int, Tuple[np.ndarray, np.ndarray]], int]:
    """Per pid, the merged spans of the chosen steps; and the most steps a process ran."""
    is_step = np.isin(kept.group, step_groups)
    spans: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    counts: List[int] = []
    # kept is by process and thread, each thread's in start order: a process is a slice of it, and its steps,
    # when they all ran on one thread (the usual case), need no sort
    pids, firsts = np.unique(kept.pid, return_index=True)
    bounds = list(firsts[1:]) + [len(kept)]
    for pid, first, last in zip(pids.tolist(), firsts.tolist(), bounds):
        mine = np.flatnonzero(is_step[first:last]) + first
        if not len(mine):
            continue
        tids = kept.tid[mine[[0, -1]]]
        if tids[0] != tids[-1] or (kept.tid[mine] != tids[0]).any():
            mine = mine[np.argsort(kept.start[mine], kind="stable")]
        chosen = mine[steps.chosen(len(mine))]
        spans[pid] = _merged(kept.start[chosen], kept.end[chosen])
        counts.append(len(mine))
    return spans, max(counts, default=0)


def _merged(starts: np.ndarray, ends: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted, non-overlapping spans, as (starts, ends) for bisecting."""
    merged_starts: List[int] = []
    merged_ends: List[int] = []
    for start, end in sorted(zip(starts.tolist(), ends.tolist())):
        if merged_ends and start <= merged_ends[-1]:
            merged_ends[-1] = max(merged_ends[-1], end)
        else:
            merged_starts.append(start)
            merged_ends.append(end)
    return np.array(merged_starts, np.int64), np.array(merged_ends, np.int64)


def _describe(steps: StepWindow, count: int, dropped: int, steps_too: bool) -> str:
    parts = [f"{a}-{min(b, count)}" if b > a else str(a) for a, b in steps.ranges if a <= count]
    if steps.last:
        parts.append(f"the last {min(steps.last, count)}")
    held = ", ".join(parts) if parts else "none"
    if steps_too:
        return (f"trace.json holds the run's loops, epochs and evaluations, and only steps {held} of {count} with "
                f"every task in them: {dropped} tasks left out (--trace-steps all keeps them)")
    return (f"trace.json holds every task of the run's own markers, and the others (operators, primitives) only "
            f"for steps {held} of {count}: {dropped} tasks left out (--trace-steps all keeps them)")
