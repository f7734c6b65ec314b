"""Two sides compared: what moved from BASE to NEW, and whether the step time moved beyond noise.

Input: each side's :class:`Side`: one run (a result folder), or its repeats (a folder of result folders),
each :class:`Run` with what its run.json says and its summary as ``autoitt report`` reads it. Output: a
:class:`Comparison`, which :mod:`._render` shows and :meth:`Comparison.to_json` gives as ``--json``. Only
what both sides have is compared; what one has alone is named in ``unmatched``.

The noise test takes every run's steady median of each loop's iterations (a step and the wait before it,
as the user lives the loop; the step task's where a summary lacks them) (:mod:`._noise`). The other figures
are one run's a side: the side's typical run, whose steady median of the compared loop is its side's median.
Per-step figures (operators, hotspots, your code) are that run's totals over its number of steps of the
compared loop (the first both sides have), so runs of different lengths compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..builtin.samples.hotspots import TOP as TOP_HOTSPOTS
from ..builtin.statistics.summary import STEADY_BUCKET_RATIO
from ..builtin.statistics.taskstats import TOP_OPERATORS
from ..profile.summary import Summary
from ._conditions import Conditions, conditions
from ._noise import Medians, Verdict, difference, median_interval

#: movers kept per table (JSON and terminal alike: the biggest by how much they moved)
TOP_MOVERS = 12


@dataclass(frozen=True)
class Change:
    """One figure in both runs (None where a run has none)."""

    base: Optional[float]
    new: Optional[float]

    @property
    def delta(self) -> Optional[float]:
        return None if self.base is None or self.new is None else self.new - self.base

    @property
    def ratio(self) -> Optional[float]:
        return None if self.base is None or self.new is None or not self.base else self.new / self.base

    def to_json(self) -> Dict[str, Optional[float]]:
        return {"base": self.base, "new": self.new, "delta": self.delta, "ratio": self.ratio}


@dataclass(frozen=True)
class Run:
    """One side of the comparison: a result folder, the script and backend its run.json names, its summary."""

    folder: Path
    script: str
    backend: str
    summary: Summary
    #: the script's arguments and run.json's machine (:mod:`._conditions`)
    args: Tuple[str, ...] = ()
    machine: Optional[Dict[str, float]] = None


@dataclass(frozen=True)
class Side:
    """BASE or NEW: the folder given, and its runs (the folder itself, or the result folders it holds)."""

    folder: Path
    runs: Tuple[Run, ...]

    @property
    def script(self) -> str:
        return self.runs[0].script

    @property
    def backend(self) -> str:
        return self.runs[0].backend

    def typical(self, label: Optional[str]) -> Run:
        """The run whose steady median of ``label`` (the iteration's, else the step's) is the side's median
        (the lower of the two middle ones); the first run where none has the loop."""
        timed = [(step.steady_iteration_median_s or step.steady_median_s, i) for i, run in enumerate(self.runs)
                 for step in getattr(run.summary, "steps", ()) if step.label == label]
        if not timed:
            return self.runs[0]
        return self.runs[sorted(timed)[(len(timed) - 1) // 2][1]]

    def to_json(self) -> Dict[str, Any]:
        return {"folder": str(self.folder), "script": self.script, "backend": self.backend,
                "runs": [str(run.folder) for run in self.runs]}


#: the two timings of a step loop, and the fields of StepStats each is read from (median, p95, mean, histogram)
TIMINGS = {
    "iteration": ("steady_iteration_median_s", "steady_iteration_p95_s", "steady_iteration_mean_s",
                  "steady_iteration_histogram"),
    "step": ("steady_median_s", "steady_p95_s", "steady_mean_s", "steady_histogram"),
}


@dataclass(frozen=True)
class Timing:
    """One timing of a step loop's steady steps in both sides: the ``iteration`` (a step and the wait before
    it, as the user lives the loop) or the ``step`` (its task alone). Median: each side's (the geometric mean
    of its runs'); p95 and mean: its typical run's."""

    median_s: Change
    p95_s: Change
    mean_s: Change
    #: NEW against BASE: "slower", "faster" (beyond noise), "within noise" or "unknown", and how it was decided
    #: (:mod:`._noise`)
    verdict: Verdict
    #: each side's runs' steady medians and intervals
    base_medians: Medians
    new_medians: Medians

    @property
    def known(self) -> bool:
        return bool(self.base_medians.values_s and self.new_medians.values_s)

    def to_json(self) -> Dict[str, Any]:
        def runs(medians: Medians) -> List[Dict[str, Any]]:
            return [{"median_s": value, "interval_s": None if found is None else [found.low_s, found.high_s]}
                    for value, found in zip(medians.values_s, medians.intervals)]

        return {"median_s": self.median_s.to_json(), "p95_s": self.p95_s.to_json(), "mean_s": self.mean_s.to_json(),
                "difference": self.verdict.difference, "decided": self.verdict.how,
                "base_runs": runs(self.base_medians), "new_runs": runs(self.new_medians)}


@dataclass(frozen=True)
class StepComparison:
    """One step loop (``label``) of the whole run, or of one rank: its steady steps' time in both sides."""

    label: str
    rank: Optional[int]
    steps: Change
    #: by :data:`TIMINGS`' names
    timings: Dict[str, Timing]
    #: seconds per step, per phase either side has
    phases: Dict[str, Change] = field(default_factory=dict)
    #: the loop's time per iteration over the phases' steps (the phases' sum)
    iteration_s: Change = Change(None, None)

    @property
    def primary(self) -> str:
        """The timing the verdict is on: the iteration where both sides have it, else the step."""
        return "iteration" if self.timings["iteration"].known else "step"

    @property
    def median_s(self) -> Change:
        return self.timings[self.primary].median_s

    @property
    def verdict(self) -> Verdict:
        return self.timings[self.primary].verdict

    @property
    def difference(self) -> str:
        return self.verdict.difference

    def to_json(self) -> Dict[str, Any]:
        return {"label": self.label, "rank": self.rank, "steps": self.steps.to_json(), "difference": self.difference,
                "decided_on": self.primary, **{name: timing.to_json() for name, timing in self.timings.items()},
                "phases_s_per_step": {name: change.to_json() for name, change in self.phases.items()},
                "phases_iteration_s": self.iteration_s.to_json()}


@dataclass(frozen=True)
class Mover:
    """An entry of a table (an operator, a function, a line) whose time moved: seconds per step in each run.

    A run whose table lacks the entry has None. Its table may be complete (the entry is "new" in NEW, or
    "gone" from it), or only the run's most expensive entries (summary.json keeps 15): then the entry was
    below them, at most the table's last (``base_at_most``/``new_at_most``), and it "entered" or "left" it."""

    name: str
    where: str
    change: Change
    base_at_most: Optional[float] = None
    new_at_most: Optional[float] = None

    @property
    def status(self) -> str:
        if self.change.base is None:
            return "entered" if self.base_at_most is not None else "new"
        if self.change.new is None:
            return "left" if self.new_at_most is not None else "gone"
        return "changed"

    @property
    def moved(self) -> float:
        """How much it moved at least, in seconds per step (a bound standing in for a figure a table lacks)."""
        base = self.change.base if self.change.base is not None else self.base_at_most or 0.0
        new = self.change.new if self.change.new is not None else self.new_at_most or 0.0
        return new - base

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "where": self.where, "status": self.status, **self.change.to_json(),
                "base_at_most": self.base_at_most, "new_at_most": self.new_at_most}


@dataclass(frozen=True)
class Comparison:
    base: Side
    new: Side
    #: the whole run's step loops, then each rank's (where both runs have ranks)
    steps: List[StepComparison]
    #: the time per step of what moved most, new and gone entries included: PyTorch's operators (self time,
    #: oneDNN's included), sampled functions in the compared steps, the lines of the user's code
    operators: List[Mover]
    hotspots: List[Mover]
    lines: List[Mover]
    #: per own task label, what the process counted per instance (or as a rate: utilisation, IPC)
    counters: Dict[str, Dict[str, Change]]
    #: the run's wall time: before collection, collected, between, after
    run_split: Dict[str, Change]
    #: what one run has and the other has not, or what cannot be compared, in words
    unmatched: List[str]
    #: the typical runs' programs and machines (:mod:`._conditions`); None where not weighed (VTune)
    conditions: Optional[Conditions] = None

    @property
    def main(self) -> Optional[StepComparison]:
        """The compared step loop: the first of the whole run's."""
        return next((step for step in self.steps if step.rank is None), None)

    def slower_by_more_than(self, fraction: float) -> bool:
        """Whether NEW's steady step median is slower than BASE's beyond noise, and by more than ``fraction``."""
        main = self.main
        ratio = main.median_s.ratio if main is not None else None
        return main is not None and main.difference == "slower" and ratio is not None and ratio - 1 > fraction

    @property
    def verdict(self) -> str:
        """One line: the compared loop's steady median, how it moved, and whether beyond noise."""
        main = self.main
        if main is None:
            return "no step loop to compare: " + (self.unmatched[0] if self.unmatched else "neither run has steps")
        ratio = main.median_s.ratio
        moved = f"{(ratio - 1) * 100:+.1f} %" if ratio is not None else "?"
        said = {"slower": "NEW is slower beyond noise", "faster": "NEW is faster beyond noise",
                "within noise": "within noise", "inconclusive": f"inconclusive, {main.verdict.how}",
                "unknown": "noise unknown (too few steps, or a summary.json without step histograms: "
                           "`autoitt report --recompute FOLDER` adds them)"}[main.difference]
        return (f"{said}: {main.label!r} steady {main.primary} median {_ms(main.median_s.base)} -> "
                f"{_ms(main.median_s.new)} ({moved})")

    def to_json(self) -> Dict[str, Any]:
        return {
            "verdict": self.verdict,
            "slower": self.main is not None and self.main.difference == "slower",
            "per_step_of": self.main.label if self.main else None,
            "base": self.base.to_json(), "new": self.new.to_json(),
            "steps": [step.to_json() for step in self.steps],
            "operators": [m.to_json() for m in self.operators],
            "hotspots": [m.to_json() for m in self.hotspots],
            "lines": [m.to_json() for m in self.lines],
            "counters": {label: {name: c.to_json() for name, c in values.items()}
                         for label, values in self.counters.items()},
            "run_split": {name: change.to_json() for name, change in self.run_split.items()},
            "unmatched": list(self.unmatched),
            "conditions": None if self.conditions is None else self.conditions.to_json(),
        }


def _ms(seconds: Optional[float]) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.3g} ms"


def compare(base: Side, new: Side, threshold: Optional[float] = None) -> Comparison:
    """What moved from ``base`` to ``new`` (:class:`Comparison`). ``threshold``: the least fraction the steady
    medians must move by to differ beyond noise, instead of the method's default (:mod:`._noise`)."""
    unmatched: List[str] = []
    if Path(base.script).name != Path(new.script).name:
        unmatched.append(f"BASE profiled {base.script}, NEW {new.script}: comparing what matches, with no verdict")
    if base.backend != new.backend:
        unmatched.append(f"BASE ran on the {base.backend} backend, NEW on the {new.backend} backend: "
                         "only the run's wall time compares")
        return Comparison(base, new, [], [], [], [], {}, _wall(base, new), unmatched)
    if base.backend == "vtune":
        return _compare_vtune(base, new, unmatched)
    first = next((s.label for s in base.runs[0].summary.steps
                  if any(t.label == s.label for t in new.runs[0].summary.steps)), None)
    x, y = base.typical(first), new.typical(first)
    a, b = x.summary, y.summary
    steps = _steps(base, new, a.steps, b.steps, None, threshold, unmatched)
    ranks_a, ranks_b = {r.rank: r for r in a.ranks}, {r.rank: r for r in b.ranks}
    for rank in sorted(set(ranks_a) & set(ranks_b)):
        steps += _steps(base, new, ranks_a[rank].steps, ranks_b[rank].steps, rank, threshold, unmatched)
    if set(ranks_a) ^ set(ranks_b):
        only = sorted(set(ranks_a) ^ set(ranks_b))
        unmatched.append(f"rank(s) {', '.join(map(str, only))} in one side only")
    older = [str(run.folder) for side in (base, new) for run in side.runs
             if any(not s.steady_iteration_histogram for s in run.summary.steps)]
    if older:
        unmatched.append(f"no step histogram in {', '.join(older)} (a summary.json of an earlier autoitt): the "
                         "noise test needs it; `autoitt report --recompute FOLDER` adds it")
    main = next((s for s in steps if s.rank is None), None)
    per_a = _per_step(a, main.label) if main else None
    per_b = _per_step(b, main.label) if main else None
    operators = hotspots = lines = []
    if per_a and per_b:
        # a compiled graph by its function: a changed model compiles to a graph of another hash
        operators = _movers(a.operators, b.operators, key=lambda t: (t.domain, t.label or t.name),
                            name=lambda t: t.label or t.name, where=lambda t: t.domain,
                            seconds=lambda t: t.self_with_library_s, per=(per_a, per_b), cap=TOP_OPERATORS)
        hotspots = _movers(a.hotspots_by_task.get(main.label, ()), b.hotspots_by_task.get(main.label, ()),
                           key=lambda h: (h.function, h.library or h.file), name=lambda h: h.function,
                           where=lambda h: h.library or h.file or "", seconds=lambda h: h.self_s,
                           per=(per_a, per_b), cap=TOP_HOTSPOTS)
        # a line's CPU time and the time its thread waited there (off-CPU samples; 0 in a run without them):
        # a line that waits more (a sleep, I/O, a lock) moves by its waiting, which CPU time alone misses
        lines = _movers(a.hotspot_lines, b.hotspot_lines, key=lambda h: (h.file, h.line),
                        name=lambda h: f"{h.file}:{h.line}", where=lambda h: h.function,
                        seconds=lambda h: h.total_s + h.off_cpu_s, per=(per_a, per_b), cap=TOP_HOTSPOTS)
        if (a.operator_sampling is None) != (b.operator_sampling is None):
            unmatched.append("one side recorded PyTorch's operators in every step, the other in a sample of them "
                             "(--torch-ops): each operator table is scaled to its whole run, and they compare")
    found = conditions(x.script, x.args, y.script, y.args, x.machine, y.machine)
    unmatched += found.notes()
    return Comparison(base, new, [_weighed(step, found) for step in steps], operators, hotspots, lines,
                      _counters(a.counters, b.counters), _run_split(a.run_split, b.run_split), unmatched, found)


def _weighed(step: StepComparison, found: Conditions) -> StepComparison:
    """``step`` with its verdict weighed by the conditions (:meth:`Conditions.weigh`)."""
    timing = step.timings[step.primary]
    return replace(step, timings={**step.timings, step.primary: replace(timing, verdict=found.weigh(timing.verdict))})


def _steps(base: Side, new: Side, a: Sequence, b: Sequence, rank: Optional[int], threshold: Optional[float],
           unmatched: List[str]) -> List[StepComparison]:
    """The step loops the typical runs both have (``a``, ``b``: the whole run's, or one rank's), tested on
    every run's median; the loops of one side only named in ``unmatched``."""
    whose = "" if rank is None else f"rank {rank}'s "
    by_a, by_b = {s.label: s for s in a}, {s.label: s for s in b}
    for label in [s.label for s in a if s.label not in by_b]:
        unmatched.append(f"{whose}step loop {label!r} only in BASE")
    for label in [s.label for s in b if s.label not in by_a]:
        unmatched.append(f"{whose}step loop {label!r} only in NEW")
    found = []
    for label in [s.label for s in a if s.label in by_b]:
        x, y = by_a[label], by_b[label]
        timings = {}
        for name, (median, p95, mean, histogram) in TIMINGS.items():
            medians = [_medians(side, label, rank, median, histogram) for side in (base, new)]
            timings[name] = Timing(
                median_s=Change(medians[0].center_s, medians[1].center_s) if medians[0].values_s and
                medians[1].values_s else Change(getattr(x, median) or None, getattr(y, median) or None),
                p95_s=Change(getattr(x, p95) or None, getattr(y, p95) or None),
                mean_s=Change(getattr(x, mean) or None, getattr(y, mean) or None),
                verdict=difference(medians[0], medians[1], threshold), base_medians=medians[0],
                new_medians=medians[1])
        phases = {name: Change(x.phases.get(name, {}).get("seconds_per_step"),
                               y.phases.get(name, {}).get("seconds_per_step"))
                  for name in [*x.phases, *(n for n in y.phases if n not in x.phases)]}
        found.append(StepComparison(label=label, rank=rank, steps=Change(x.count, y.count), timings=timings,
                                    phases=phases, iteration_s=Change(x.iteration_s or None, y.iteration_s or None)))
    return found


def _medians(side: Side, label: str, rank: Optional[int], median: str, histogram: str) -> Medians:
    """Every run's steady median of ``label`` (of the whole run, or of ``rank``; the StepStats fields ``median``
    and ``histogram``), with its interval; the runs without it (an earlier autoitt's summary) left out."""
    values, intervals = [], []
    for run in side.runs:
        steps = run.summary.steps if rank is None else next(
            (r.steps for r in run.summary.ranks if r.rank == rank), ())
        step = next((s for s in steps if s.label == label and getattr(s, median) > 0), None)
        if step is not None:
            values.append(getattr(step, median))
            intervals.append(median_interval(getattr(step, histogram), STEADY_BUCKET_RATIO))
    return Medians(tuple(values), tuple(intervals))


def _per_step(summary, label: str) -> Optional[int]:
    """The number of steps of ``label`` in the whole run: what per-step figures divide its totals by."""
    return next((s.count for s in summary.steps if s.label == label and s.count), None)


def _movers(a: Sequence, b: Sequence, *, key: Callable, name: Callable, where: Callable, seconds: Callable,
            per: Tuple[int, int], cap: Optional[int]) -> List[Mover]:
    """The entries of two tables by how much their time per step moved, most first, at most
    :data:`TOP_MOVERS`. ``cap``: how many entries a table keeps (a table that long may lack cheaper ones)."""
    rows: Dict[Any, List[Any]] = {}
    for side, items, steps in ((0, a, per[0]), (1, b, per[1])):
        for item in items:
            row = rows.setdefault(key(item), [item, None, None])
            row[1 + side] = (row[1 + side] or 0.0) + seconds(item) / steps

    def least(items: Sequence, steps: int) -> Optional[float]:
        truncated = cap is not None and len(items) >= cap
        return min(seconds(item) for item in items) / steps if truncated else None

    bounds = least(a, per[0]), least(b, per[1])
    movers = [Mover(name(item), where(item), Change(x, y), base_at_most=bounds[0] if x is None else None,
                    new_at_most=bounds[1] if y is None else None) for item, x, y in rows.values()]
    movers.sort(key=lambda m: -abs(m.moved))
    return movers[:TOP_MOVERS]


#: counters compared as they are (rates and means); the others are totals, compared per instance
_RATES = ("cpu_utilization", "ipc")
_SKIPPED = ("count", "page_faults", "context_switches")  # the count itself; totals with a per-instance twin


def _counters(a: Dict[str, Dict[str, float]], b: Dict[str, Dict[str, float]]) -> Dict[str, Dict[str, Change]]:
    found = {}
    for label in [label for label in a if label in b]:
        x, y = a[label], b[label]
        values = {}
        for name in [n for n in x if n in y and n not in _SKIPPED]:
            if name in _RATES or name.endswith(("_per_instance", "_pki")):
                values[name] = Change(x[name], y[name])
            elif x.get("count") and y.get("count"):
                values[f"{name}_per_instance"] = Change(x[name] / x["count"], y[name] / y["count"])
        found[label] = values
    return found


def _run_split(a: Optional[Dict[str, float]], b: Optional[Dict[str, float]]) -> Dict[str, Change]:
    if not a or not b:
        return {}
    return {name: Change(a.get(name), b.get(name)) for name in a}


def _compare_vtune(base: Side, new: Side, unmatched: List[str]) -> Comparison:
    """Two VTune runs: CPU time per task and per function of each analysis both ran (VTune's figures are CPU
    time over the run, not per step: there are no step durations to test)."""
    unmatched.append("VTune runs have CPU time per task, not step durations: no step time to test against noise")
    reports_a = {(a.run.analysis, r.name): r for a in base.runs[0].summary.analyses for r in a.results}
    reports_b = {(a.run.analysis, r.name): r for a in new.runs[0].summary.analyses for r in a.results}
    hotspots: List[Mover] = []
    operators: List[Mover] = []
    for key in [k for k in reports_a if k in reports_b]:
        x, y = reports_a[key], reports_b[key]
        operators += _movers(x.tasks, y.tasks, key=lambda t: t.task, name=lambda t: t.task,
                             where=lambda t: key[0], seconds=lambda t: t.cpu_time_s or 0.0, per=(1, 1), cap=None)
        hotspots += _movers(x.functions, y.functions, key=lambda f: (f.function, f.module), name=lambda f: f.function,
                            where=lambda f: f.module or "", seconds=lambda f: f.cpu_time_s or 0.0, per=(1, 1),
                            cap=None)
    return Comparison(base, new, [], operators, hotspots, [], {}, _wall(base, new), unmatched)


def _wall(base: Side, new: Side) -> Dict[str, Change]:
    """What every backend's summary has: the run's elapsed and collected time (the first run's a side)."""
    a, b = base.runs[0].summary, new.runs[0].summary
    return {"elapsed_s": Change(a.elapsed_s, b.elapsed_s), "collected_s": Change(a.collected_s, b.collected_s)}
