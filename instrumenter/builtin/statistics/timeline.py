"""Which tasks ``trace.json`` keeps: all of autoitt's (and the script's own), and the rest in a window of steps.

With ``emit_itt`` every PyTorch operator and oneDNN primitive is a task: a
long run's full timeline is more than a viewer can load. The statistics are
computed from every task; the timeline keeps every task of the run's own
domains (loops, epochs, steps, evals: few) and, of the others, those of a
window of steps (``--trace-steps``):

* ``auto`` (the default): everything when the run has at most
  :data:`AUTO_ALL_TASKS` tasks; otherwise steps 2-11 (past warm-up) and the
  last 10, whole steps while they hold at most :data:`AUTO_ALL_TASKS` tasks
  in their process (the first of them always: a run of a few huge steps,
  such as LBFGS's thousands of operators a step, keeps one or two of them);
  and when the run's own tasks alone are more than that (millions of tiny
  steps), its steps too only in that window (its loops, epochs and
  evaluations all kept), so the file stays one a viewer loads (about 100
  bytes a task);
* ``all``: everything;
* ``A-B,C,-N``: steps A to B, step C, the last N steps (1-based, counted per
  process in the order they began, over every step label).

A task is in the window when it overlaps one of the window's steps in its own
process (intra-op threads and DataLoader-free work included). The one pass
over the traces keeps the own domains' tasks (and, for ``all`` or a short
``auto`` run, everything) and finds the window as the steps end
(:class:`~instrumenter.builtin.statistics.intervals.Window`): the memory held is the
timeline's, whatever the run's length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import numpy as np

from .aggregate import Aggregates
from .intervals import Intervals, Keep, overlapping
from ...profile.step_window import StepWindow

if TYPE_CHECKING:
    from ...profile.read_context import ReadContext

#: Up to this many tasks, ``auto`` keeps the whole timeline (about 100 MB of trace.json).
AUTO_ALL_TASKS = 1_000_000


def timeline(found: Aggregates, context: ReadContext) -> Tuple[Intervals, Optional[str]]:
    """The instances ``trace.json`` holds (``context.trace_steps``'s window) and, when some were left out, a
    sentence saying what it holds.

    ``found`` is the pass made with :func:`keep_policy`: everything it kept, or the own domains' and the
    others of its window of steps.
    """
    if found.kept_everything:
        return found.kept, None
    own, step_labels, steps = set(context.domains), context.step_labels, context.trace_steps
    kept = found.kept
    steps_too = steps.automatic and len(kept) > AUTO_ALL_TASKS
    if steps_too:
        # millions of the run's own steps: those too only in the window (loops, epochs, evals all kept)
        step_groups = [g for g, (domain, name) in enumerate(found.groups) if domain in own and name in step_labels]
        chosen = ~np.isin(kept.group, step_groups)
        for pid, spans in found.window_spans.items():
            if len(found.window_spans) == 1:
                chosen |= overlapping(spans, kept.start, kept.end) & (kept.pid == pid)
                continue
            mine = kept.pid == pid
            chosen[mine] |= overlapping(spans, kept.start[mine], kept.end[mine])
        kept = kept.take(chosen)
    kept = Intervals.concat([kept, found.window])
    dropped = int(found.count.sum()) - len(kept)
    if not dropped:
        return kept, None
    return kept, _describe(steps, found.window_steps, found.window_held, dropped, steps_too)


def keep_policy(steps: StepWindow) -> Keep:
    """What the pass keeps besides the own domains: everything for ``all``; for ``auto``, everything up to
    :data:`AUTO_ALL_TASKS` tasks, else its window; for a chosen window, that window."""
    if steps.everything:
        return Keep(limit=None)
    if steps.automatic:
        return Keep(limit=AUTO_ALL_TASKS, ranges=steps.ranges, last=steps.last, budget=AUTO_ALL_TASKS)
    return Keep(limit=0, ranges=steps.ranges, last=steps.last)


def _describe(steps: StepWindow, count: int, held: List[int], dropped: int, steps_too: bool) -> str:
    named = {n for n in range(1, count + 1) if any(a <= n <= b for a, b in steps.ranges)}
    named |= set(range(max(count - steps.last, 0) + 1, count + 1))
    if set(held) == named:  # the window the user (or auto) asked for
        parts = [f"{a}-{min(b, count)}" if b > a else str(a) for a, b in steps.ranges if a <= count]
        if steps.last:
            parts.append(f"the last {min(steps.last, count)}")
        shown = ", ".join(parts) if parts else "none"
    else:  # the budget held fewer: the steps it held, as ranges
        runs: List[List[int]] = []
        for ordinal in held:
            if runs and runs[-1][1] == ordinal - 1:
                runs[-1][1] = ordinal
            else:
                runs.append([ordinal, ordinal])
        shown = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs) or "none"
        shown += f" (whole steps while they held at most {AUTO_ALL_TASKS:,} tasks)"
    if steps_too:
        return (f"trace.json holds the run's loops, epochs and evaluations, and only steps {shown} of {count} with "
                f"every task in them: {dropped} tasks left out (--trace-steps all keeps them)")
    return (f"trace.json holds every task of the run's own markers, and the others (operators, primitives) only "
            f"for steps {shown} of {count}: {dropped} tasks left out (--trace-steps all keeps them)")
