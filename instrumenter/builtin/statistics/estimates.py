"""The whole run's operators from those a sample of its iterations recorded (``--torch-ops sampled``).

Each iteration task (a step loop, an eval loop) is a kind of its own: its operators are summed over its
measured iterations (recorded, past their own warm-up, not disturbed: :mod:`.disturbed`) and scaled by that
kind's own factor, its iterations over its measured ones. Its recorded warm-up and disturbed iterations count
as they ran, once: scaled, they would stand for iterations that did not run so, and left out, a kind's slow
first iterations would be missing from its total. (With the first iteration recorded too,
:func:`~instrumenter.runtime.torch_ops.with_first`, MNIST's ``relu`` went from 0.79-0.80 of what the
program's own clock timed to 1.06-1.11, the clock's wrapper in the run; its test batches of 1000 are 4
iterations, one of them the first.) One factor for all kinds (what autoitt did before)
is biased: an operator only steps run (backward, the optimizer) was scaled by a share that counted the
eval iterations too, and a forward operator of a few heavy eval batches was scaled by the steps' far larger
factor (a VAE's ``aten::mm``: 270 calls for 720).

An estimate of a total over ``M`` iterations (less those counted as they ran) from ``n`` measured, as a
sample without replacement:
``M * mean``, with a 95 % interval of ``1.96 * M * s / sqrt(n) * sqrt(1 - n / M)``, ``s`` the standard
deviation of the per-iteration figure (zero where an iteration ran none). Kinds add, and so do their
variances. Where every iteration was measured the figure is exact; where every measured iteration ran the
same number of calls of an operator, its count's interval is zero: the count is exact if the iterations
not recorded ran what the recorded ones did.

An operator recorded outside every recorded iteration (a script's own ``emit_itt`` region) counts as it
ran, unscaled.

Input: the run's :class:`~.aggregate.Aggregates`, per iteration task its :class:`~.disturbed.Recorded`
iterations and how many it ran; output: the operators' :class:`~.summary.TaskStats` and, per kind, what
was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np

from .aggregate import LIBRARY_DOMAINS
from .disturbed import Recorded
from .intervals import near_spans
from .phases import nesting, parents
from .summary import TaskStats

if TYPE_CHECKING:
    from .aggregate import Aggregates

#: The normal quantile of a two-sided 95 % interval.
Z95 = 1.96
#: The figures an operator has, in the order of :class:`Figures`' columns.
FIGURES = ("count", "inside_ns", "self_ns", "self_library_ns")


@dataclass(frozen=True)
class Kind:
    """One iteration task's share of the estimate: how many iterations it ran (run-wide), how many were
    measured (their operators summed and scaled) and how many recorded ones count as they ran."""

    task: str
    iterations: int
    measured: int
    #: recorded iterations counted as they ran, not scaled: warm-up and disturbed (:mod:`.disturbed`)
    as_ran: int = 0

    @property
    def scale(self) -> float:
        """What the measured iterations' figures are multiplied by: they stand for every iteration but those
        counted as they ran."""
        return (self.iterations - self.as_ran) / self.measured if self.measured else 0.0

    def to_json(self) -> dict:
        return {"task": self.task, "iterations": self.iterations, "measured": self.measured,
                "as_ran": self.as_ran, "scale": self.scale}


@dataclass(frozen=True)
class Figures:
    """Per group (an index of :attr:`Aggregates.groups`), ``values[:, k]`` is figure ``FIGURES[k]`` (float64)."""

    values: np.ndarray

    @classmethod
    def zeros(cls, groups: int) -> "Figures":
        return cls(np.zeros((groups, len(FIGURES))))


@dataclass(frozen=True)
class _Instances:
    """The operator instances inside some iterations: each one's group, the iteration holding it (an index of
    the iterations given) and its figures (count 1, inside, self, self with library)."""

    group: np.ndarray
    holder: np.ndarray
    figures: np.ndarray  # instances x FIGURES


def _inside(found: Aggregates, iterations: np.ndarray) -> Optional[Tuple[np.ndarray, _Instances]]:
    """Which of ``iterations`` (indices into ``found.kept``) had their tasks kept (a mask), and the instances
    inside those, each with its holder (innermost iteration, as an index of ``iterations``) and its figures,
    as the aggregate sums the whole run's: a library's task (oneDNN's) counted in its parent's self time with
    library, and time inside a group counted once where a task of it nests directly in itself."""
    held = found.held(iterations)
    if not held.any():
        return None
    tasks = found.holding_tasks()
    chosen_at = np.flatnonzero(held)
    chosen = iterations[held]
    library = np.array([bool(domain) and domain.startswith(LIBRARY_DOMAINS) for domain, _ in found.groups]
                       or [False], np.bool_)
    # the instances of the iterations' processes and time only, so a run of millions nests a few thousand
    near = near_spans(tasks, tasks.pid[chosen], tasks.start[chosen], tasks.end[chosen])
    near[chosen] = True
    remap = np.cumsum(near) - 1
    tasks, chosen = tasks.take(near), remap[chosen]
    line = nesting(tasks)
    if line is None:
        return None
    begin, finish, depth = line.begin, line.finish, line.depth
    order = np.argsort(begin[chosen], kind="stable")
    ordered = chosen[order]
    at = np.searchsorted(begin[ordered], begin, side="right") - 1
    holder = np.maximum(at, 0)
    within = np.flatnonzero((at >= 0) & (finish <= finish[ordered][holder]) & (depth > depth[ordered][holder]))
    duration = (tasks.end - tasks.start).astype(np.int64)
    parent = parents(begin, finish, depth, within)
    has = parent >= 0
    group = tasks.group.astype(np.int64)
    children = np.zeros(len(tasks), np.int64)
    np.add.at(children, parent[has], duration[within[has]])
    not_library = has & ~library[group[within]]
    owned = np.zeros(len(tasks), np.int64)
    np.add.at(owned, parent[not_library], duration[within[not_library]])
    nested_in_itself = np.zeros(len(within), np.bool_)
    nested_in_itself[has] = group[parent[has]] == group[within[has]]
    figures = np.stack([np.ones(len(within)), np.where(nested_in_itself, 0, duration[within]),
                        (duration - children)[within], (duration - owned)[within]], axis=1).astype(np.float64)
    return held, _Instances(group[within], chosen_at[order[holder[within]]], figures)


def _sums(instances: _Instances, groups: int, mask: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per group, the figures summed over the iterations ``mask`` picks (a mask of the iterations given to
    :func:`_inside`), and the sums of their squares per iteration (for the variance between iterations)."""
    mine = mask[instances.holder]
    group, holder, figures = instances.group[mine], instances.holder[mine], instances.figures[mine]
    key = holder * groups + group
    keys, inverse = np.unique(key, return_inverse=True)
    per = np.stack([np.bincount(inverse, weights=figures[:, k], minlength=len(keys)) for k in range(len(FIGURES))],
                   axis=1) if len(keys) else np.zeros((0, len(FIGURES)))
    of = keys % groups
    total = np.stack([np.bincount(of, weights=per[:, k], minlength=groups) for k in range(len(FIGURES))], axis=1)
    squares = np.stack([np.bincount(of, weights=per[:, k] ** 2, minlength=groups) for k in range(len(FIGURES))],
                       axis=1)
    return total, squares


@dataclass(frozen=True)
class Estimate:
    """Per group, the whole run's figures (``value``) and their 95 % intervals' half-widths (``half``: zero
    where exact), the kinds they were scaled from, and how many recorded iterations (their tasks kept)
    count as they ran (warm-up, disturbed)."""

    value: Figures
    half: Figures
    kinds: List[Kind]
    as_ran: int = 0
    #: every kind scaled by one factor, all iterations over all recorded, from the whole run's statistics:
    #: where some kind's recorded iterations had none of their tasks kept (a run past its trace limit whose
    #: window of steps holds none of them), so no kind can be told from another; no interval then
    pooled: bool = False


def estimate(found: Aggregates, recorded: Dict[str, Recorded], ran: Dict[str, Tuple[int, int]]) -> Estimate:
    """The whole run's operator figures (see the module's text): per iteration task, its measured iterations
    (``recorded[task].measured``; its warm-up and disturbed ones where none is left) scaled to the
    iterations it ran (``ran[task]``: iterations, recorded); plus what ran outside every recorded iteration,
    as it ran."""
    groups = len(found.groups)
    iterations = {task: n for task, (n, _) in ran.items()}
    tasks = [task for task in recorded if iterations.get(task)]
    measured = [r.measured if len(r.measured) else np.concatenate([r.warmup, r.disturbed])
                for r in (recorded[task] for task in tasks)]
    every = [np.concatenate([r.measured, r.warmup, r.disturbed]) for r in (recorded[task] for task in tasks)]
    value, variance, kinds = Figures.zeros(groups).values, Figures.zeros(groups).values, []
    # one pass over every recorded iteration, so an operator is held by its innermost one only
    picked = np.concatenate(every + [np.zeros(0, np.int64)]).astype(np.int64)
    kind_of = np.concatenate([np.full(len(e), k) for k, e in enumerate(every)] + [np.zeros(0, np.int64)])
    is_measured = np.concatenate([np.isin(e, m) for e, m in zip(every, measured)] + [np.zeros(0, np.bool_)])
    found_inside = _inside(found, picked) if len(picked) else None
    held = found_inside[0] if found_inside else np.zeros(len(picked), np.bool_)
    for k, task in enumerate(tasks):
        mine = held & (kind_of == k)
        mask, aside = mine & is_measured, mine & ~is_measured
        n, e = int(mask.sum()), int(aside.sum())
        m = iterations[task] - e  # the iterations the measured ones stand for
        kinds.append(Kind(task, iterations[task], n, e))
        if not n:
            continue
        if e:  # warm-up and disturbed iterations: as they ran, not scaled
            value += _sums(found_inside[1], groups, aside)[0]
        total, squares = _sums(found_inside[1], groups, mask)
        mean = total / n
        value += m * mean
        if n < m and n > 1:
            sample = np.maximum(squares - n * mean ** 2, 0.0) / (n - 1)
            variance += m * m * sample / n * (1 - n / m)
        elif n < m:  # one iteration: no spread to measure; the interval is the estimate itself
            variance += (m * mean) ** 2
    if any(not kind.measured and ran[kind.task][1] for kind in kinds):
        whole = np.stack([found.count, found.inside_ns, found.self_ns, found.self_library_ns], axis=1)
        picked_all = sum(p for _, p in ran.values())
        scale = sum(iterations.values()) / picked_all if picked_all else 1.0
        return Estimate(Figures(whole.astype(np.float64) * scale), Figures.zeros(groups), kinds, pooled=True)
    if found_inside is not None and found.kept_everything:
        # outside every recorded iteration (all of them are kept here): as it ran
        inside_all, _ = _sums(found_inside[1], groups, held)
        whole = np.stack([found.count, found.inside_ns, found.self_ns, found.self_library_ns], axis=1)
        value += np.maximum(whole.astype(np.float64) - inside_all, 0.0)
    return Estimate(Figures(value), Figures(Z95 * np.sqrt(variance)), kinds, sum(k.as_ran for k in kinds))


def estimated_operators(operators: List[TaskStats], found: Aggregates, result: Estimate,
                        thread_time_ns: int) -> List[TaskStats]:
    """``operators`` (their recorded statistics) with the run's estimated count and times, and their
    intervals; mean, extremes and percentiles stay those of every call recorded. An operator whose estimate
    is no call (it ran only in iterations left out) is dropped."""
    number = {group: at for at, group in enumerate(found.groups)}
    out = []
    for op in operators:
        g = number[(op.domain, op.name)]
        count, inside, own, own_library = result.value.values[g]
        half = result.half.values[g]
        if round(count) < 1:
            continue
        out.append(replace(
            op, count=int(round(count)), total_s=inside / 1e9, self_s=own / 1e9, self_with_library_s=own_library / 1e9,
            share=inside / thread_time_ns if thread_time_ns else 0.0,
            count_interval=None if result.pooled else float(half[0]),
            self_with_library_interval_s=None if result.pooled else float(half[3]) / 1e9))
    return out
