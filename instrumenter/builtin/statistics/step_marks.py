"""Where epochs start and evaluations ran, as step indices of each step loop: the marks of ``steps.svg``.

A step loop's steps are indexed as :func:`~instrumenter.builtin.statistics.taskstats.step_stats` orders its durations:
its label's finished instances on the run's own domains, in the order :attr:`Aggregates.kept` holds them
(by process and thread, each thread's in the order they began). Per process, with the steps sorted by
start:

* an epoch (an instance of an epoch region's task) starts at the first step that starts inside it;
* an evaluation (an instance of an eval region's loop, or of its call) ran after step ``i`` when it starts
  after step ``i`` starts and before step ``i + 1`` does: after the step ended, or during it (an
  evaluation inside the step loop's body).

Which tasks are epochs and evaluations comes from the task names each region's markers record, as
``instrumentation.json`` holds them (:class:`transforms.RegionTasks`: a role, and the task ``around`` a loop
or call and the one of ``each`` iteration), and from the tasks library callbacks name
(:mod:`instrumenter.runtime.libraries`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterable, List, Sequence, Set, Tuple

import numpy as np

from transforms import RegionTasks

from ...runtime.libraries import EPOCH, EVAL_LOOP
from .intervals import Intervals

if TYPE_CHECKING:
    from ...profile.read_context import ReadContext


@dataclass(frozen=True, eq=False)
class StepMarks:
    """Marks of one step loop, as 0-based indices into its ``durations_s`` (sorted, unique)."""

    #: the first step of each epoch
    epochs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the steps after which an evaluation ran ...
    evals: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: ... and, for each, whether it ran during the step rather than after it
    evals_during: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))
    #: the steps were not all kept (a trace limit): marks are known for the kept steps only
    partial: bool = False


def mark_labels(tasks: Iterable[RegionTasks], names: Iterable[str], step_labels: Iterable[str] = ()
                ) -> Tuple[Set[str], Set[str]]:
    """(epoch task names, evaluation task names) among ``names`` (the own domains' task names).

    An epoch is an epoch region's iteration (or a library's epoch); an evaluation is an eval region's
    whole loop (its task ``around``, rather than each of its batches), or its call, or a library's eval
    run. No task of a step region is either."""
    present = set(names)
    epochs, evals, not_steps = {EPOCH}, {EVAL_LOOP}, set(step_labels)
    for task in tasks:
        if task.role == "epoch":
            epochs.add(task.each or task.around)
        elif task.role == "eval":
            evals.add(task.around if task.around in present or task.each is None else task.each)
        elif task.role == "step":
            not_steps.update(name for name in (task.around, task.each) if name is not None)
    return (epochs & present) - not_steps, (evals & present) - not_steps


def _ids(groups: Sequence[Tuple[str, str]], names: Iterable[str], domains: Iterable[str]) -> List[int]:
    wanted, own = set(names), set(domains)
    return [g for g, (domain, name) in enumerate(groups) if name in wanted and domain in own]


def step_marks(kept: Intervals, groups: Sequence[Tuple[str, str]], context: ReadContext,
               partial: bool = False) -> Dict[str, StepMarks]:
    """Per step label of ``context`` with finished steps in ``kept``: its marks, epochs and evaluations told
    by the task names of the context's regions (``partial``: ``kept`` does not hold every step of the run)."""
    domains, step_labels, tasks = list(context.domains), list(context.step_labels), context.tasks
    names = {name for domain, name in groups if domain in set(domains)}
    epoch_names, eval_names = mark_labels(tasks, names, step_labels)
    epoch_rows = np.flatnonzero(np.isin(kept.group, _ids(groups, epoch_names, domains)))
    eval_rows = np.flatnonzero(np.isin(kept.group, _ids(groups, eval_names, domains)))
    result = {}
    for label in step_labels:
        ids = _ids(groups, [label], domains)
        if not ids:
            continue
        rows = np.flatnonzero(np.isin(kept.group, ids) & kept.finished)  # the order of durations_s
        if not len(rows):
            continue
        epochs: List[np.ndarray] = []
        evals: List[np.ndarray] = []
        during: List[np.ndarray] = []
        step_pids = kept.pid[rows]
        for pid in np.unique(step_pids).tolist():
            index = np.flatnonzero(step_pids == pid)  # indices into durations_s
            order = np.argsort(kept.start[rows[index]], kind="stable")
            index = index[order]
            starts, ends = kept.start[rows[index]], kept.end[rows[index]]
            mine = epoch_rows[kept.pid[epoch_rows] == pid]
            first = np.searchsorted(starts, kept.start[mine], side="left")
            inside = first < len(starts)
            inside[inside] = starts[first[inside]] <= kept.end[mine][inside]
            epochs.append(index[first[inside]])
            mine = eval_rows[kept.pid[eval_rows] == pid]
            at = np.searchsorted(starts, kept.start[mine], side="right") - 1
            found = at >= 0
            evals.append(index[at[found]])
            during.append(kept.start[mine][found] < ends[at[found]])
        epoch_steps = np.unique(np.concatenate(epochs))
        eval_at, eval_during = np.concatenate(evals), np.concatenate(during)
        order = np.lexsort((eval_during, eval_at))  # by step; an evaluation after the step before one during it
        eval_steps, first = np.unique(eval_at[order], return_index=True)
        during_only = eval_during[order][first]
        result[label] = StepMarks(epoch_steps.astype(np.int64), eval_steps.astype(np.int64), during_only, partial)
    return result
