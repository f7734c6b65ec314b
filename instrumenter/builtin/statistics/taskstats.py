"""From a run's aggregates to what the summary shows: tasks, collected time, steps, operators.

Input is :func:`~instrumenter.builtin.statistics.aggregate.aggregate`'s :class:`Aggregates`
(statistics of every task over the whole run, and the instances kept: all of
the run's own domains'), and the run's :class:`~instrumenter.profile.read_context.ReadContext` (its step labels,
own domains, first step); output is the plain dataclasses of :mod:`instrumenter.builtin.statistics.summary`. Times
are seconds in the output, nanoseconds inside.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from . import phases
from .aggregate import Aggregates, Intervals
from .disturbed import Recorded, split_recorded
from .compiled import GRAPH_PREFIX
from .estimates import Estimate, estimate, estimated_operators
from .intervals import near_spans
from .phases import COMMUNICATION_PREFIXES, TORCH_DOMAIN
from .summary import STEADY_BUCKET_RATIO, BuiltinSummary, StepStats, TaskStats
from transforms import BATCH_ROLE

if TYPE_CHECKING:
    from ...profile.read_context import ReadContext

#: The names of the PyTorch tasks the operator table ranks: operators, collectives (gloo's run on its threads),
#: and torch.compile's graphs (their fused kernels).
OPERATOR_PREFIXES = ("aten::", "autograd::", GRAPH_PREFIX) + COMMUNICATION_PREFIXES


def task_stats(aggregates: Aggregates) -> List[TaskStats]:
    """Per (domain, name): count, mean, min, max and percentiles over every instance; total over the time
    inside an instance (a task nested in itself on a thread counted once), so its share stays within 100 %
    of the thread time; self time is each instance's own (disjoint between instances), summed."""
    a = aggregates
    thread_time = a.thread_time_ns
    stats = []
    for group, (domain, name) in enumerate(a.groups):
        count = int(a.count[group])
        if not count:
            continue
        stats.append(TaskStats(
            domain=domain, name=name, count=count, total_s=int(a.inside_ns[group]) / 1e9,
            self_s=int(a.self_ns[group]) / 1e9, self_with_library_s=int(a.self_library_ns[group]) / 1e9,
            mean_s=int(a.sum_ns[group]) / count / 1e9,
            min_s=int(a.min_ns[group]) / 1e9, max_s=int(a.max_ns[group]) / 1e9,
            p50_s=a.percentile_ns(group, 0.50) / 1e9, p95_s=a.percentile_ns(group, 0.95) / 1e9,
            p99_s=a.percentile_ns(group, 0.99) / 1e9,
            share=(int(a.inside_ns[group]) / thread_time) if thread_time else 0.0,
        ))
    stats.sort(key=lambda s: (s.domain, -s.total_s))
    return stats


#: Step time has settled when it is within this fraction of the steady median (the later half's median) ...
SETTLED = 0.25
#: ... and so are all but one of the steps starting there, this many in all (one slow step is an outlier,
#: two are still warm-up).
SETTLED_WINDOW = 5


def warmup(nanoseconds: np.ndarray) -> int:
    """How many first steps are warm-up: the steps before the first one that is within :data:`SETTLED` of
    the median of the run's later half, with at most one step of the :data:`SETTLED_WINDOW` starting there
    above it. A slow step after that (an evaluation, a checkpoint) does not count."""
    count = len(nanoseconds)
    if count < 3:
        return 0
    above = nanoseconds > np.median(nanoseconds[count // 2:]) * (1 + SETTLED)
    seen = np.concatenate([[0], np.cumsum(above)])
    window_end = np.minimum(np.arange(count) + SETTLED_WINDOW, count)
    settled = ~above & (seen[window_end] - seen[:count] <= 1)
    return int(np.argmax(settled)) if settled.any() else 0


def _step_ids(groups: List[tuple], label: str, domains: Optional[Iterable[str]]) -> List[int]:
    wanted = None if domains is None else set(domains)
    return [g for g, (domain, name) in enumerate(groups) if name == label and (wanted is None or domain in wanted)]


def step_stats(kept: Intervals, groups: List[tuple], context: ReadContext,
               totals: Optional[Aggregates] = None) -> List[StepStats]:
    """Per step label of ``context``, on its own domains: the finished instances, in the
    order ``kept`` holds them (by process and thread, each thread's in the order they began); the
    durations kept for the plot as float32 seconds.

    ``totals``: a run past its trace limit, whose ``kept`` stops at the limit: count, mean, median and p95
    come from its statistics (percentiles within ``aggregate.PERCENTILE_ERROR``), the first step and the
    durations (the plot's) from ``kept``."""
    result = []
    for label in context.step_labels:
        ids = _step_ids(groups, label, context.domains)
        if not ids:
            continue
        loop = np.isin(kept.group, ids)
        mask = loop & kept.finished
        nanoseconds = kept.end[mask]
        np.subtract(nanoseconds, kept.start[mask], out=nanoseconds)  # in place: a run may have millions
        if not len(nanoseconds):
            continue
        iterations = _iterations(kept, mask)
        timed = _undisturbed(kept, loop, mask, context if label in context.operators_in else None)
        durations = nanoseconds.astype(np.float32) / np.float32(1e9)  # the plot's: 4 bytes a step
        first, count = float(nanoseconds[0]) / 1e9, len(nanoseconds)
        del mask, loop
        # the duration statistics are of the steps that ran as without autoitt's operator recording: all of
        # them, or with --torch-ops sampled those that did not record their operators (when some did not)
        times = nanoseconds[timed] if timed is not None else nanoseconds
        last = len(times) - 1
        at_p95 = min(last, int(round(0.95 * last)))
        at = sorted({last // 2, (last + 1) // 2, at_p95})
        ordered = dict(zip(at, np.partition(times, at)[at].tolist()))  # those ranks only: no full sort
        p95 = ordered[at_p95] / 1e9
        median = (ordered[last // 2] + ordered[(last + 1) // 2]) / 2e9
        mean = int(times.sum()) / 1e9 / len(times)
        warm = warmup(nanoseconds if timed is None else _relative(nanoseconds, timed))
        warm_s = int(nanoseconds[:warm].sum()) / 1e9
        skip = int(timed[:warm].sum()) if timed is not None else warm
        after = times[skip:] if skip < len(times) else times[-1:]
        steady = int(after.sum()) / 1e9 / len(after)
        steady_median = float(np.median(after)) / 1e9
        steady_p95 = float(np.percentile(after, 95, method="closest_observation")) / 1e9
        histogram = steady_histogram(after)
        lived = iterations[timed] if timed is not None else iterations
        lived = lived[skip:] if skip < len(lived) else lived[-1:]
        lived = lived[lived >= 0]  # a thread's first step has no step before it
        iteration = dict(steady_iteration_median_s=float(np.median(lived)) / 1e9,
                         steady_iteration_p95_s=float(np.percentile(lived, 95, method="closest_observation")) / 1e9,
                         steady_iteration_mean_s=int(lived.sum()) / 1e9 / len(lived),
                         steady_iteration_histogram=steady_histogram(lived)) if len(lived) else {}
        del nanoseconds, after, times, iterations, lived
        if totals is not None:
            count = int(totals.count[ids].sum())
            total_s = int(totals.sum_ns[ids].sum()) / 1e9
            mean = total_s / count
            median, p95 = totals.percentile_ns(ids, 0.5) / 1e9, totals.percentile_ns(ids, 0.95) / 1e9
            steady = (total_s - warm_s) / (count - warm) if count > warm else steady
        result.append(StepStats(
            label=label, count=count, mean_s=mean, median_s=median, p95_s=p95, first_s=first,
            steady_mean_s=steady, warmup_steps=warm, warmup_s=warm_s, steady_median_s=steady_median,
            steady_p95_s=steady_p95, durations_s=durations, steady_histogram=histogram, **iteration,
        ))
    return result


def _iterations(kept: Intervals, finished: np.ndarray) -> np.ndarray:
    """Per finished step (``finished``: a mask of ``kept``, each thread's steps in the order they began), the
    time since the same thread's step before it ended (ns): the step and the wait before it, as the user lives
    an iteration; -1 for a thread's first."""
    ends = kept.end[finished].astype(np.int64)
    pid, tid = kept.pid[finished], kept.tid[finished]
    found = np.full(len(ends), -1, np.int64)
    if len(ends) > 1:
        same = (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1])
        found[1:] = np.where(same, ends[1:] - ends[:-1], -1)
    return found


def steady_histogram(nanoseconds: np.ndarray) -> Tuple[Tuple[float, int], ...]:
    """Durations (ns) in buckets :data:`~.summary.STEADY_BUCKET_RATIO` apart: (lower bound in s, count), ascending."""
    buckets = np.floor(np.log(np.maximum(nanoseconds, 1).astype(np.float64)) / np.log(STEADY_BUCKET_RATIO))
    index, counts = np.unique(buckets.astype(np.int64), return_counts=True)
    return tuple((float(STEADY_BUCKET_RATIO ** int(i) / 1e9), int(c)) for i, c in zip(index, counts))


def _undisturbed(kept: Intervals, loop: np.ndarray, finished: np.ndarray, context: Optional[ReadContext]
                 ) -> Optional[np.ndarray]:
    """Per finished step (``finished``: a mask of ``kept``, within the mask ``loop`` of the loop's steps),
    whether it ran without recording its operators, where the run sampled them (``context``'s rule) and some
    steps did not record them; else None (every step counts alike)."""
    if context is None or context.operator_sampling is None:
        return None
    where = np.flatnonzero(loop)
    quiet = ~context.operator_sampling.recorded(iteration_numbers(kept, where))[finished[where]]
    # a short run is mostly the recorded window (steps 2-11 of 15): its steps are what there is to time
    return quiet if 2 * int(quiet.sum()) > len(quiet) else None


def _relative(nanoseconds: np.ndarray, timed: np.ndarray) -> np.ndarray:
    """Each step's duration over the steady median of its kind (steps that recorded their operators, steps
    that did not), so that :func:`warmup` finds where both settled: a recorded step is slower, not warm."""
    out = nanoseconds.astype(np.float64)
    for kind in (timed, ~timed):
        if kind.any():
            mine = out[kind]
            out[kind] = mine / max(float(np.median(mine[len(mine) // 2:])), 1.0)
    return out


def cut_steps(steps: List[StepStats], kept: Intervals, groups: List[tuple], context: ReadContext,
              cut_pids: Iterable[int]) -> List[StepStats]:
    """``steps`` with :attr:`~instrumenter.builtin.statistics.summary.StepStats.ran_at_least` set for each loop that ran in a
    process whose trace was cut short (``cut_pids``): its steps after the cut are not in the trace."""
    cut = np.fromiter(cut_pids, np.int64)
    if not len(cut):
        return steps
    result = []
    for step in steps:
        loop = np.isin(kept.group, _step_ids(groups, step.label, context.domains))
        if np.isin(kept.pid[loop], cut).any():
            step = replace(step, ran_at_least=max(step.count, int(loop.sum())))
        result.append(step)
    return result


def step_phases(found: Aggregates, ids: List[int], warm: int, domains: Optional[Iterable[str]],
                step_labels: Iterable[str], recorded: Optional[Recorded] = None, batch_labels: Iterable[str] = ()
                ) -> Tuple[Dict[str, Dict[str, float]], Optional[phases.Measured]]:
    """The phases of the steps of groups ``ids`` (:mod:`.phases`), per step, over the steps after the
    warm-up (the first ``warm``) whose tasks were kept: all of them, or those of the timeline's window in a
    run of more than a million tasks; and what was measured (how many steps, the oneDNN primitives created
    in them). ``recorded``: the steps recorded their operators by a rule (``--torch-ops sampled``): only
    those that did are measured, past their own warm-up and not disturbed (:mod:`.disturbed`)."""
    kept = found.kept
    loop = np.flatnonzero(np.isin(kept.group, ids))
    tasks, chosen = found.holding(loop[kept.finished[loop]][warm:] if recorded is None else recorded.measured)
    tasks, chosen, loop = _near(tasks, chosen, loop)
    own = set(domains or ())
    labels = set(step_labels)
    batches = set(batch_labels)
    category_of = np.array([phases.category(d, n, own, labels, batches) for d, n in found.groups] or [0], np.int64)
    creation = np.array([d == phases.CREATION_DOMAIN for d, _ in found.groups] or [False], np.bool_)
    measured = phases.measure(tasks, chosen, loop, category_of, creation)
    if measured is None:
        return {}, None
    total = sum(measured.nanoseconds.values())
    return ({name: {"seconds_per_step": ns / measured.steps / 1e9, "share": ns / total if total else 0.0}
             for name, ns in measured.nanoseconds.items()}, measured)


def iteration_numbers(kept: Intervals, loop: np.ndarray) -> np.ndarray:
    """Per instance ``loop`` indexes in ``kept``, its iteration in its process (1-based, in the order they
    began on any thread): what the runtime counted when it picked iterations to record operators in."""
    pids, starts = kept.pid[loop], kept.start[loop]
    order = np.lexsort((starts, pids))
    ordered = pids[order]
    numbers = np.empty(len(loop), np.int64)
    numbers[order] = np.arange(len(loop)) - np.searchsorted(ordered, ordered, side="left") + 1
    return numbers


def recorded_iterations(a: Aggregates, context: ReadContext) -> Dict[str, Recorded]:
    """``--torch-ops sampled``: per iteration task whose operators were sampled, its finished iterations that
    recorded them (by the runtime's rule), split into their own warm-up (recording makes them slower than the
    others, so the loop's warm-up, found on the others, would take the first ones recorded for warm-up), those
    disturbed and those measured (:mod:`.disturbed`); empty where every iteration recorded them."""
    sampling = context.operator_sampling
    if sampling is None:
        return {}
    kept, result = a.kept, {}
    for name in context.operators_in:
        loop = np.flatnonzero(np.isin(kept.group, _step_ids(a.groups, name, context.domains)))
        finished = kept.finished[loop]
        picked = loop[finished][sampling.recorded(iteration_numbers(kept, loop))[finished]]
        result[name] = split_recorded(kept, picked, warmup(kept.end[picked] - kept.start[picked]))
    return result


def iterations_by_task(a: Aggregates, context: ReadContext) -> Dict[str, Tuple[int, int]]:
    """``--torch-ops sampled``: per iteration task whose operators were sampled, how many iterations it ran and
    how many recorded their operators (the runtime counts each task's own, in each process)."""
    sampling, result = context.operator_sampling, {}
    for name in context.operators_in:
        ids = _step_ids(a.groups, name, context.domains)
        if a.limited:  # the kept instances stop at the trace limit: the whole run's count, as one process's
            counts = [int(a.count[ids].sum())] if ids else []
        else:
            counts = np.unique(a.kept.pid[np.isin(a.kept.group, ids)], return_counts=True)[1].tolist()
        result[name] = (sum(counts), sum(sampling.count(n) for n in counts))
    return result


def operator_sampling(context: ReadContext, recorded: Dict[str, Recorded], ran: Dict[str, Tuple[int, int]],
                      found: Estimate) -> Dict[str, Any]:
    """``--torch-ops sampled``: the summary's account of it. ``kinds``: per iteration task, its iterations,
    those measured and its scale (:mod:`.estimates`); ``scale``: all iterations over all measured (each kind
    is scaled by its own)."""
    iterations = sum(n for n, _ in ran.values())
    measured = sum(kind.measured for kind in found.kinds)
    picked = sum(p for _, p in ran.values())
    return {"rule": context.operator_sampling.describe(), **context.operator_sampling.to_json(),
            "tasks": list(context.operators_in), "iterations": iterations, "recorded": picked,
            "warmup": sum(len(r.warmup) for r in recorded.values()),
            "disturbed": sum(len(r.disturbed) for r in recorded.values()), "left_out": 0, "as_ran": found.as_ran,
            "measured": measured, "pooled": found.pooled,
            "scale": (iterations / picked if picked else 1.0) if found.pooled else (iterations / measured if measured else 1.0),
            "kinds": [kind.to_json() for kind in found.kinds]}


#: the operators summary.json keeps: the most expensive, by self time with their library's
TOP_OPERATORS = 15


def summarize(aggregates: Aggregates, context: ReadContext, top: int = TOP_OPERATORS) -> BuiltinSummary:
    """The summary of a run from its aggregates: its tasks, steps and operators (the reading adds the rest)."""
    a = aggregates
    stats = task_stats(a)
    operators = [s for s in stats if s.domain == TORCH_DOMAIN and s.name.startswith(OPERATOR_PREFIXES)]
    recorded = recorded_iterations(a, context)
    sampled = None
    if context.operator_sampling is not None:
        ran = iterations_by_task(a, context)
        found = estimate(a, recorded, ran)
        sampled = operator_sampling(context, recorded, ran, found)
        operators = estimated_operators(operators, a, found, a.thread_time_ns)
    operators = sorted(operators, key=lambda s: -s.self_with_library_s)[:top]
    warnings = list(a.warnings)
    if a.unfinished:
        warnings.append(f"{a.unfinished} task(s) never ended (the run stopped inside them, or its trace ends there); "
                        "they end at the last event")
    return BuiltinSummary(
        elapsed_s=context.elapsed_s,
        collected_s=a.collected_ns / 1e9,
        thread_time_s=a.thread_time_ns / 1e9,
        processes=a.processes,
        threads=a.threads,
        events=a.events,
        tasks=stats,
        steps=[_with_phases(a, step, context, recorded.get(step.label))
               for step in step_stats(a.kept, a.groups, context, a if a.limited else None)],
        operators=operators,
        unfinished=a.unfinished,
        warnings=warnings,
        operator_sampling=sampled,
    )


def _near(tasks: Intervals, chosen: np.ndarray, loop: np.ndarray) -> Tuple[Intervals, np.ndarray, np.ndarray]:
    """The instances the phases of ``chosen`` need: those overlapping a chosen step or the time since the
    step before it (``loop``, in kept order: by process, thread, then start), with the indices remapped. A
    long run's window of 20 steps then measures 20 steps' tasks, not the run's millions of steps."""
    if not len(chosen) or len(chosen) == len(loop):
        return tasks, chosen, loop
    at = np.searchsorted(loop, chosen)
    before = loop[np.maximum(at - 1, 0)]
    same = (at > 0) & (tasks.pid[before] == tasks.pid[chosen]) & (tasks.tid[before] == tasks.tid[chosen])
    starts = np.where(same, tasks.end[before], tasks.start[chosen])
    near = near_spans(tasks, tasks.pid[chosen], starts, tasks.end[chosen])
    near[chosen] = True
    near[before[same]] = True
    remap = np.cumsum(near) - 1
    loop = loop[near[loop]]
    return tasks.take(near), remap[chosen], remap[loop]


def _with_phases(a: Aggregates, step: StepStats, context: ReadContext, recorded: Optional[Recorded]) -> StepStats:
    first_step = context.first_step
    found, measured = step_phases(a, _step_ids(a.groups, step.label, context.domains), step.warmup_steps,
                                  context.domains, context.step_labels, recorded,
                                  [tasks.around for tasks in context.tasks if tasks.role == BATCH_ROLE])
    if measured is None:
        return replace(step, first_step=first_step)
    return replace(step, phases=found, phase_steps=measured.steps, steady_creations=measured.creations,
                   steady_creation_s=measured.creation_ns / measured.steps / 1e9, first_step=first_step,
                   iteration_s=sum(measured.nanoseconds.values()) / measured.steps / 1e9,
                   measured_spans=measured.spans)


def run_split(traces, windows: Dict[int, List[Tuple[int, int]]], record) -> Optional[Dict[str, float]]:
    """Where the run's time went in its main process (the first one started that no other traced process
    started): before the first collection window, in windows, between them, after the last one."""
    if record.started_at is None or not traces:
        return None
    pids = {trace.pid for trace in traces}
    main = min((t for t in traces if t.ppid not in pids), key=lambda t: t.wall_start_ns, default=traces[0])
    spans = windows.get(main.pid, [])

    def wall(ts: int) -> float:  # monotonic ns of the main process, to seconds since the run started
        return (main.wall_start_ns + ts - main.start_ns) / 1e9 - record.started_at

    elapsed = record.elapsed_s
    if not spans:
        return {"before_s": elapsed, "collected_s": 0.0, "between_s": 0.0, "after_s": 0.0}
    before = min(max(wall(spans[0][0]), 0.0), elapsed)
    collected = sum(end - start for start, end in spans) / 1e9
    after = min(max(elapsed - wall(spans[-1][1]), 0.0), elapsed - before)
    return {"before_s": before, "collected_s": collected,
            "between_s": max(elapsed - before - collected - after, 0.0), "after_s": after}
