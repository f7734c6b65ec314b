"""The built-in backend's summary: task, step and operator statistics (wall time, from ITT events), the
ranks of a multi-process run, CPU-time samples and counters per task.

:class:`BuiltinSummary` is the built-in backend's :class:`~instrumenter.profile.summary.Summary`;
its JSON is the common ``summary.json`` object with ``vtune`` null. Times are
seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...profile.summary import Summary, json_object


@dataclass(frozen=True)
class TaskStats:
    """One task (domain, name). A task that nests in itself on a thread (recursion) has each instance in
    ``count``, ``mean_s``, ``min_s`` and ``max_s``, but its time once in ``total_s`` and ``share``."""

    domain: str
    name: str
    count: int  # instances (begins)
    total_s: float  # time inside at least one instance, summed over threads
    self_s: float  # time inside an instance but in none of its child tasks
    mean_s: float  # of an instance's duration
    min_s: float
    max_s: float
    share: float  # total, of the summary's thread time
    #: self time with the oneDNN primitives the task calls counted in: an operator's own time, its
    #: library's implementation included (``aggregate.LIBRARY_DOMAINS``)
    self_with_library_s: float = 0.0
    #: percentiles of an instance's duration, within 1 % (a histogram's: ``aggregate.PERCENTILE_ERROR``)
    p50_s: float = 0.0
    p95_s: float = 0.0
    p99_s: float = 0.0
    #: ``--torch-ops sampled``: the half-widths of the 95 % intervals of ``count`` and ``self_with_library_s``,
    #: estimated from a sample of the iterations (:mod:`instrumenter.builtin.statistics.estimates`); 0: every
    #: iteration sampled ran as many calls (the count exact where the others ran the same); None: as counted
    count_interval: Optional[float] = None
    self_with_library_interval_s: Optional[float] = None
    #: how the operator table names the row where ``name`` is not for reading: a ``torch.compile`` graph
    #: (``## Call CompiledFxGraph <hash> ##``) as ``compiled Net.forward (train.py:12)``
    #: (:mod:`instrumenter.builtin.statistics.compiled`); None: ``name``
    label: Optional[str] = None


#: ``StepStats.steady_histogram``'s buckets: each spans [lower, lower * this)
STEADY_BUCKET_RATIO = 1.01


@dataclass(frozen=True)
class StepStats:
    label: str
    count: int
    mean_s: float
    median_s: float
    p95_s: float
    first_s: float
    steady_mean_s: float  # mean of the steps after the warm-up
    #: every step's duration, in order: for the plot and the rank comparison, never saved (a run's
    #: millions of steps would make summary.json as large as the trace); empty in a loaded summary
    durations_s: Sequence[float] = field(repr=False, compare=False, default=())
    #: the warm-up: the first steps until step time settles (:func:`instrumenter.builtin.statistics.taskstats.warmup`)
    warmup_steps: int = 0
    warmup_s: float = 0.0
    #: median and p95 of the steps after the warm-up
    steady_median_s: float = 0.0
    steady_p95_s: float = 0.0
    #: those steps' durations as a histogram of 1 % buckets (:data:`STEADY_BUCKET_RATIO`): (lower bound in
    #: seconds, count), ascending, empty buckets left out; what ``autoitt compare`` tests the medians on
    #: (``instrumenter.comparison``). Empty in a summary.json written before it was kept
    steady_histogram: Tuple[Tuple[float, int], ...] = ()
    #: the same steps as iterations, as the user lives them: each from the end of its thread's step before it
    #: (the wait for data and what the loop ran between included): median, p95, mean, and the histogram of
    #: 1 % buckets (``autoitt compare``'s verdict is on them); 0 and empty where not kept
    steady_iteration_median_s: float = 0.0
    steady_iteration_p95_s: float = 0.0
    steady_iteration_mean_s: float = 0.0
    steady_iteration_histogram: Tuple[Tuple[float, int], ...] = ()
    #: the run's number of the first step here (``--skip-steps N`` collects from step N + 1; steps are counted
    #: across epochs): ``first_s`` is that step's, and the warm-up counts from it
    first_step: int = 1
    #: where a step's time goes (:mod:`instrumenter.builtin.statistics.phases`): phase -> {"seconds_per_step", "share"},
    #: the shares summing to 1; empty with VTune, and in a rank's steps
    phases: Dict[str, Dict[str, float]] = field(default_factory=dict)
    #: how many steps the phases are over: the steps after the warm-up whose tasks were kept (a run of more
    #: than a million tasks keeps those of the timeline's window)
    phase_steps: int = 0
    #: oneDNN primitive creations during those steps, and their time per step (a creation hitting oneDNN's
    #: primitive cache takes about a microsecond; much more per step means misses: shapes changing?)
    steady_creations: int = 0
    steady_creation_s: float = 0.0
    #: the loop's time per iteration over those steps, as the user lives it: each step and the wait before it
    #: (the loop's own time since the previous step ended, less evaluations run there): the phases' sum
    iteration_s: float = 0.0
    #: where the trace of a process that ran these steps was cut short (a full disk, a process killed while
    #: writing), the steps known to have run: those recorded, finished or not (``count`` is the finished
    #: ones), so at least this many ran, maybe more after the cut; 0: the trace was read to its end
    ran_at_least: int = 0
    #: the steps the phases are over, per (pid, tid): (starts, ends) in CLOCK_MONOTONIC ns, for the samples'
    #: share of them; never saved (the reading that made the phases hands them on)
    measured_spans: Dict = field(repr=False, compare=False, default_factory=dict)


@dataclass(frozen=True)
class Hotspot:
    """A function's sampled CPU time (:mod:`instrumenter.builtin.samples.hotspots`): a Python function at a line of the
    original script (``file``, ``line``), or a native one in a ``library``. ``share``: its self time, of the
    CPU time sampled in the list's scope."""

    function: str
    file: Optional[str]
    line: Optional[int]
    library: Optional[str]
    self_s: float
    total_s: float
    share: float
    #: a native row stands for every instance of one C++ function template (``function`` names them with
    #: ``<…>``): their full names, when they are more than the one ``function`` says
    instances: Sequence[str] = ()
    #: lines of the user's (``hotspot_lines``): the time, estimated from off-CPU samples, its thread was
    #: blocked (a sleep, I/O, a lock, a collective, the GIL; not a wait for a core) with this line the
    #: innermost of the user's on its stack
    off_cpu_s: float = 0.0


@dataclass(frozen=True)
class RankStats:
    """One rank of a multi-process run: its processes (the rank's own and its workers), its steps."""

    rank: int
    pids: List[int]
    steps: List[StepStats]


@dataclass(frozen=True)
class Straggler:
    """For one step label: per step (the ith of every rank), the spread between the fastest and slowest rank."""

    label: str
    ranks: List[int]
    steps: int  # steps compared: as many as the rank with the fewest ran
    spread_mean_s: float
    spread_max_s: float
    slowest_rank: int  # the rank slowest most often
    slowest_count: int
    slowest_counts: Dict[str, int]  # rank -> steps in which it was the slowest



@dataclass(kw_only=True)
class BuiltinSummary(Summary):
    """What the built-in collector recorded of a run: every ITT task's statistics, and the samples'."""

    processes: int
    threads: int
    events: int
    tasks: List[TaskStats]
    steps: List[StepStats]
    operators: List[TaskStats]
    unfinished: int
    #: the time threads spent inside tasks, summed over threads (what a task's share is of)
    thread_time_s: float = 0.0
    #: a multi-process run's ranks (empty unless processes have two distinct ranks or more) and its stragglers
    ranks: List[RankStats] = field(default_factory=list)
    stragglers: List[Straggler] = field(default_factory=list)
    #: what trace.json holds when it leaves tasks out (a long run's operators outside a window of steps)
    trace_window: Optional[str] = None
    #: where the run's time went, in its main process: ``before_s`` (start-up, imports, data preparation:
    #: until the first resume), ``collected_s``, ``between_s`` (between collection windows), ``after_s``
    #: (after the last pause); None when the run's start was not recorded
    run_split: Optional[Dict[str, float]] = None
    #: the machine's other work during the run: ``cpus``, ``run_cpu_s``, ``other_cpu_s``, ``elapsed_s``
    #: (:func:`instrumenter.profile.machine.during`); None where it was not read
    machine: Optional[Dict[str, float]] = None
    #: CPU-time sampling (:mod:`instrumenter.builtin.samples.sampling`): ``rate_hz``, ``mechanism``, ``python_frames``,
    #: ``samples``, ``dropped``, ``processes``, ``reasons`` (why sampling was unavailable or degraded),
    #: ``period_s``, ``collected_cpu_s``, ``outside_cpu_s``, ``cpu_s_by_task`` (the CPU time sampled in each own
    #: region); None: not sampled
    sampling: Optional[Dict[str, Any]] = None
    #: sampled functions over the collected training, per task (the own regions by label, then the most
    #: sampled other tasks), and outside collection (start-up, imports, after the last pause)
    hotspots: List[Hotspot] = field(default_factory=list)
    #: the lines of the project's own files by total sampled CPU time (what each line runs, libraries included)
    hotspot_lines: List[Hotspot] = field(default_factory=list)
    hotspots_by_task: Dict[str, List[Hotspot]] = field(default_factory=dict)
    hotspots_outside: List[Hotspot] = field(default_factory=list)
    #: the lines of the project's own files by total CPU time outside collection (``import torch``, data
    #: preparation)
    hotspot_lines_outside: List[Hotspot] = field(default_factory=list)
    #: per own task label (step, epoch, ...), what the process counted while it ran
    #: (:func:`instrumenter.builtin.statistics.counters.task_counters`): ``cpu_s``, ``cpu_utilization``, ``page_faults``,
    #: ``context_switches`` and, where the PMU could be read, ``cycles``, ``instructions``, ``ipc``, ...
    counters: Dict[str, Dict[str, float]] = field(default_factory=dict)
    #: why hardware counters were not read, and other notes of the collector on counting
    counter_notes: List[str] = field(default_factory=list)
    #: per task name of the run's own domains, how many began while collection was paused (outside every
    #: training region, as after the last one ended): in none of the figures; counted by the collector
    uncollected: Dict[str, int] = field(default_factory=dict)
    #: ``--torch-ops sampled``: ``rule`` (which iterations recorded PyTorch's operators), ``every``,
    #: ``ranges``, ``tasks`` (the iteration tasks sampled), ``iterations`` (of those tasks, run-wide), ``recorded`` (those that recorded them) and
    #: ``scale`` (iterations / recorded: what ``operators``' counts and times are multiplied by); None where
    #: every iteration recorded them (or none did)
    operator_sampling: Optional[Dict[str, Any]] = None

    def to_json(self) -> dict:
        """Statistics only, so it stays small however long the run (step durations are left out); ``vtune``
        null."""
        def bare(steps: List[StepStats]) -> List[StepStats]:
            return [replace(step, durations_s=(), measured_spans={}) for step in steps]

        data = asdict(replace(self, steps=bare(self.steps), unwritten=[],
                              ranks=[replace(rank, steps=bare(rank.steps)) for rank in self.ranks]))
        del data["unwritten"]
        for step in [*data["steps"], *(s for rank in data["ranks"] for s in rank["steps"])]:
            del step["durations_s"], step["measured_spans"]
            for name in ("steady_histogram", "steady_iteration_histogram"):  # JSON's own shape: lists
                step[name] = [list(bucket) for bucket in step[name]]
        return json_object(data)

    @classmethod
    def from_json(cls, data: dict) -> "BuiltinSummary":
        """The summary :meth:`to_json` gave; an earlier autoitt's lacks the later fields (their defaults then).

        Raises ``KeyError``/``TypeError`` on JSON of another shape, ``ValueError`` on a VTune run's.
        """
        def steps(items: List[dict]) -> List[StepStats]:
            def histogram(step: dict, name: str) -> tuple:
                return tuple((float(lower), int(count)) for lower, count in step.get(name, ()))

            return [StepStats(**{**step, "steady_histogram": histogram(step, "steady_histogram"),
                                 "steady_iteration_histogram": histogram(step, "steady_iteration_histogram")})
                    for step in items]

        def hotspots(rows) -> List[Hotspot]:
            return [Hotspot(**row) for row in rows]

        data = dict(data)
        if data.pop("vtune", None) is not None:
            raise ValueError("a VTune run's summary, not the built-in backend's")
        return cls(**{
            **data,
            "tasks": [TaskStats(**task) for task in data["tasks"]],
            "steps": steps(data["steps"]),
            "operators": [TaskStats(**task) for task in data["operators"]],
            "ranks": [RankStats(rank["rank"], rank["pids"], steps(rank["steps"])) for rank in data["ranks"]],
            "stragglers": [Straggler(**straggler) for straggler in data["stragglers"]],
            "hotspots": hotspots(data.get("hotspots", ())),
            "hotspot_lines": hotspots(data.get("hotspot_lines", ())),
            "hotspots_by_task": {task: hotspots(rows) for task, rows in data.get("hotspots_by_task", {}).items()},
            "hotspots_outside": hotspots(data.get("hotspots_outside", ())),
            "hotspot_lines_outside": hotspots(data.get("hotspot_lines_outside", ())),
        })
