"""The built-in backend's summary on a terminal, in the spirit of VTune's Summary window.

One screen by default: the run's header and where it went, each step loop's
time and phases, the top operators, the notes. ``--verbose`` adds the task
tables of every domain and the full operator list; the JSON has everything.
"""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Dict, List, Optional

from rich.console import Console
from rich.table import Table

from ...profile.console import collected_line, duration, literal, table
from ...profile.instrumentation import Instrumentation
from ..statistics.disturbed import DISTURBED
from ..statistics.summary import BuiltinSummary, Hotspot, StepStats, TaskStats
from ..samples.hotspots import elide_templates
from .notes import notes, thin_hotspots, thin_phase_split
from ..statistics.taskstats import OPERATOR_PREFIXES, TORCH_DOMAIN

#: Rows of the PyTorch domain's table (``--verbose``), and operators shown without it.
_TOP = 12
_TOP_OPERATORS = 6
#: Hotspot rows shown without ``--verbose``: over the run, and per step or outside collection.
_TOP_HOTSPOTS = 8
_TOP_IN_TASK = 4
#: Rows of "Your code" on the one screen: the lines a user can change.
_TOP_LINES = 6
#: A function name longer than this is shortened on the terminal.
_NAME_WIDTH = 60
#: Width of a phase's bar at a share of 100 %.
_BAR = 30


def _domain_order(tasks: List[TaskStats], own_domain: Optional[str]) -> List[str]:
    """autoitt's domains first (the entry script's, then its modules'), then PyTorch, then the rest."""
    return sorted({t.domain for t in tasks},
                  key=lambda d: (d != own_domain, not d.startswith("autoitt."), d != TORCH_DOMAIN, d))


def render(summary: BuiltinSummary, console: Console, *, script: str, result_dir: Path,
           instrumentation: Optional[Instrumentation], verbose: bool = False, files: bool = True) -> None:
    """Header, where the run went, step loops with their phases, top operators, notes, and (``files``) the
    result files there are."""
    own_domain = instrumentation.domain if instrumentation is not None else None
    share = collected_line(summary.elapsed_s, summary.collected_s)
    console.print(f"[bold]autoitt profile[/bold] of {literal(script)}, builtin backend")
    # a run whose end was not recorded (autoitt killed) has no elapsed time: never a false 0
    elapsed = duration(summary.elapsed_s) if summary.elapsed_s is not None else "unknown (the run's end was not recorded)"
    console.print(f"  elapsed {elapsed}; collected (resume..pause) "
                  f"{duration(summary.collected_s)}{share}; {summary.processes} process(es), "
                  f"{summary.threads} thread(s) with tasks, {summary.events} events{_sampled_threads(summary)}")
    split = summary.run_split
    if split and summary.elapsed_s:
        parts = (("before training", "before_s"), ("collected", "collected_s"),
                 ("between collection windows", "between_s"), ("after the last pause", "after_s"))
        console.print("  where the run went: " + ", ".join(
            f"{label} {duration(split[key])} ({split[key] / summary.elapsed_s:.0%})" for label, key in parts
            if split[key] >= 0.001 or key == "collected_s"))
    if not summary.tasks:
        console.print("[yellow]No ITT tasks were recorded.[/yellow] Either no training region ran, or it never "
                      "resumed collection (see loops.json in the result folder).")

    # without steps, the own domain's table is what there is to see
    if verbose or not summary.steps:
        _render_domains(summary, console, own_domain, all_domains=verbose)
    for step in summary.steps:
        _render_steps(step, console, summary.operator_sampling, summary.sampling)
        _render_counters(summary.counters.get(step.label), step.label, console)
    _render_evaluations(summary, console, instrumentation)
    _render_ranks(summary, console)
    _render_operators(summary, console, summary.operators if verbose else summary.operators[:_TOP_OPERATORS])
    _render_hotspots(summary, console, verbose, instrumentation)

    for note in notes(summary, instrumentation) + summary.counter_notes:
        console.print(f"[yellow]note:[/yellow] {literal(note)}")
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {literal(warning)}")
    if summary.trace_window:
        console.print(f"[dim]{literal(summary.trace_window)}[/dim]")
    if not files:
        return
    folder = literal(result_dir)
    # only the files there are: a full disk may have kept some from being written
    written = [name + {"trace.json": " (open in https://ui.perfetto.dev)", "report.html": " (open in a browser)"}.get(
               name, "") for name in ("report.html", "trace.json", "steps.svg", "summary.json")
               if (result_dir / name).is_file()]
    console.print((f"Results in {folder}/: {', '.join(written)}; " if written else
                   f"No trace.json, steps.svg or summary.json in {folder}/; ")
                  + f"`autoitt report {folder}` prints this again"
                  + ("." if verbose else ", with --verbose every task table."))


def _sampled_threads(summary: BuiltinSummary) -> str:
    """``; sampled: 9 processes, 14 threads``, where the samples saw more than the tasks did (DataLoader
    workers, OpenMP and framework threads run no task but take CPU time)."""
    sampling = summary.sampling or {}
    processes, threads = sampling.get("processes_sampled"), sampling.get("threads")
    if processes is None or threads is None or (processes <= summary.processes and threads <= summary.threads):
        return ""
    return f"; sampled: {processes} process(es), {threads} thread(s)"


def _render_domains(summary: BuiltinSummary, console: Console, own_domain: Optional[str], all_domains: bool) -> None:
    """Top tasks per domain (the own domain only, unless ``all_domains``); PyTorch's without its operators."""
    for domain in _domain_order(summary.tasks, own_domain):
        if not all_domains and domain != own_domain:
            continue
        # the operators have their own table
        rows = [t for t in summary.tasks
                if t.domain == domain and not (domain == TORCH_DOMAIN and t.name.startswith(OPERATOR_PREFIXES))]
        if not rows:
            continue
        rows.sort(key=lambda t: -t.total_s if domain != TORCH_DOMAIN else -t.self_s)
        title = f"Top tasks, domain {literal(domain)}" + (f" (top {_TOP} of {len(rows)} by self time)"
                                                if domain == TORCH_DOMAIN and len(rows) > _TOP else "")
        rows_table = table(title, ("task", "count", "total", "self", "mean", "min", "max", "total, % of thread time"))
        for task in rows[:_TOP] if domain == TORCH_DOMAIN else rows:
            rows_table.add_row(literal(task.name), str(task.count), duration(task.total_s), duration(task.self_s),
                               duration(task.mean_s), duration(task.min_s), duration(task.max_s), f"{task.share:.1%}")
        console.print(rows_table)


def _render_steps(step: StepStats, console: Console, sampled: Optional[dict] = None,
                  sampling: Optional[dict] = None) -> None:
    """One step loop: its time, warm-up and steady state, then its phases as bars; where the samples told its
    ``python`` from ``compute`` (no operator tasks), whether they were enough to."""
    steady = step.steady_median_s or step.median_s  # a summary saved before warm-up was detected
    if step.warmup_steps:
        settled = (f"warm-up {step.warmup_steps} step{'s' if step.warmup_steps > 1 else ''} "
                   f"({duration(step.warmup_s)}), then median {duration(steady)}, p95 "
                   f"{duration(step.steady_p95_s)}, mean {duration(step.steady_mean_s)}")
    else:
        settled = f"no warm-up; first step {duration(step.first_s)}"
    if step.first_step > 1:
        settled += f" (counted from step {step.first_step}, the first collected: --skip-steps)"
    waiting = step.phases.get("data", {}).get("seconds_per_step", 0.0)
    if step.iteration_s and waiting >= 0.05 * step.iteration_s:
        # what the user lives: the loop's pace, data wait included, with the step region beside it
        console.print(
            f"[bold]Iteration time[/bold] ({literal(step.label)}, over {step.phase_steps} steady steps): "
            f"{duration(step.iteration_s)} each on average: {duration(waiting)} waiting for data "
            f"({waiting / step.iteration_s:.0%}), {duration(step.iteration_s - waiting)} the rest of the step")
    if step.ran_at_least > step.count:  # the trace was cut: the steps it holds, of those known to have run
        steps = (f"{step.count} of at least {step.ran_at_least} steps that ran; the trace was cut short, the "
                 "steps after the cut are not in it")
    elif step.ran_at_least:
        steps = f"{step.count} steps; the trace was cut short after them, any later steps are not in it"
    else:
        steps = f"{step.count} steps"
    console.print(
        f"[bold]Step time[/bold] ({literal(step.label)}, {steps}): median {duration(step.median_s)}, "
        f"p95 {duration(step.p95_s)}, mean {duration(step.mean_s)}; {settled}"
    )
    if not step.phases:
        return
    over = f"its {step.phase_steps} steady steps" if step.phase_steps else "every step"
    if sampled is not None and step.label in sampled["tasks"]:
        over += " that recorded their operators"
    grid = table(f"Phases of `{literal(step.label)}` over {over} (data: waiting for the batch)",
                 ("phase", "per step", "share", "of the step loop's time"))
    grid.min_width = len(grid.title) + 2
    for name, phase in step.phases.items():
        if phase["share"] >= 0.005:
            bar = "█" * round(phase["share"] * _BAR)
            grid.add_row(literal(name), duration(phase["seconds_per_step"]), f"{phase['share']:.0%}", bar.ljust(_BAR))
    grid.columns[-1].justify = "left"
    console.print(grid)
    small = [f"{literal(name)} {duration(phase['seconds_per_step'])}" for name, phase in step.phases.items()
             if phase["share"] < 0.005 and phase["seconds_per_step"] > 0]
    if small:  # a phase is never left out without a word
        console.print(f"  [dim]under 0.5 % of the step, not drawn: {', '.join(small)} per step[/dim]")
    thin = thin_phase_split(sampling, step.label)
    if thin:
        console.print(f"[yellow]note:[/yellow] {thin}")
    waited = ((sampling or {}).get("off_cpu_s_in_steps") or {}).get(step.label) or 0
    per_step = waited / step.phase_steps if step.phase_steps else 0
    if per_step and step.steady_mean_s and per_step >= 0.05 * step.steady_mean_s:
        console.print(f"  waiting: the step's thread was blocked, off the CPU, about {duration(per_step)} a step "
                      f"({min(per_step / step.steady_mean_s, 1):.0%} of it; estimated from off-CPU samples): a sleep, "
                      "I/O, a lock, a collective, the GIL; Your code's waiting column says at which lines")


def _render_evaluations(summary: BuiltinSummary, console: Console, instrumentation: Optional[Instrumentation]) -> None:
    """One line per evaluation the rewrite marked and the run recorded: how often it ran, its time each run and
    in all, and its share of the run (an evaluation between epochs is time the steps do not show)."""
    if instrumentation is None or summary.elapsed_s is not None and summary.elapsed_s <= 0:
        return
    recorded = {(task.domain, task.name): task for task in summary.tasks}
    wanted = []
    for file in instrumentation.files:
        for region in file.regions:
            if region.get("role") == "eval" and region.get("label"):
                # a loop's runs are its `<label>_loop` task (one per run, its iterations inside); a call's, its own
                wanted.append([(file.domain, f"{region['label']}_loop"), (file.domain, region["label"])])
    # the evaluations a library runs inside a training call (Lightning's validation, Keras's validation_data)
    wanted += [[(domain, "eval_loop")] for domain in instrumentation.domains]
    shown = set()
    for names in wanted:
        task = next((recorded[name] for name in names if name in recorded), None)
        if task is None or (task.domain, task.name) in shown:
            continue
        shown.add((task.domain, task.name))
        of_collected = f", {task.total_s / summary.collected_s:.1%} of the collected time" if summary.collected_s else ""
        runs = f"{task.count} run{'s' if task.count > 1 else ''}"
        console.print(f"[bold]Evaluation[/bold] (`{literal(task.name)}`, {runs}): "
                      f"{duration(task.mean_s)} each, {duration(task.total_s)} in all{of_collected}")


def _render_counters(counted: Optional[dict], label: str, console: Console) -> None:
    """One line: what the process counted per step (CPU time and utilisation, page faults, context switches,
    and the hardware's figures where the PMU was read)."""
    if not counted or not counted.get("count"):
        return
    count = counted["count"]
    parts = [f"CPU {duration(counted['cpu_s'] / count)} ({counted['cpu_utilization']:.2f} cores busy on average)",
             f"{counted['page_faults_per_instance']:.1f} page faults",
             f"{counted['context_switches_per_instance']:.1f} context switches"]
    if "ipc" in counted:
        parts.append(f"IPC {counted['ipc']:.2f}")
        if "cache_misses_per_kilo_instruction" in counted:
            parts.append(f"{counted['cache_misses_per_kilo_instruction']:.1f} cache and "
                         f"{counted['branch_misses_per_kilo_instruction']:.1f} branch misses per 1000 instructions")
    console.print(f"  counted per `{literal(label)}` (the whole process): " + ", ".join(parts))


def _as_ran(sampled: dict) -> str:
    """The recorded iterations counted as they ran (warm-up, disturbed), said after the kinds."""
    found = sampled.get("warmup", 0) + sampled.get("disturbed", 0)
    if not found:
        return ""
    why = [f"{n} {what}" for n, what in ((sampled.get("warmup", 0), "warm-up"),
                                          (sampled.get("disturbed", 0), f"disturbed: over {DISTURBED:g}x their median")) if n]
    return f"; {found} recorded counted once as they ran, not scaled ({', '.join(why)})"


def _kinds(sampled: dict) -> str:
    """``step: 19 of 180 measured, x9.47; eval: 10 of 15, x1.5``: what each kind was scaled from."""
    return "; ".join(f"{literal(kind['task'])}: {kind['measured']:,} of {kind['iterations']:,} measured, "
                     f"x{kind['scale']:.3g}" for kind in sampled["kinds"])


def _estimated_note(sampled: dict) -> str:
    """How the sampled operator table was made, under it."""
    head = (f"operators recorded in {sampled['recorded']:,} of {sampled['iterations']:,} iterations of "
            f"{literal(', '.join(sampled['tasks']))} ({literal(sampled['rule'])}: --torch-ops sampled)")
    if sampled.get("pooled") or "kinds" not in sampled:  # one factor (a summary saved before kinds were scaled apart)
        return (f"{head}; counts and times are scaled by {sampled['scale']:.3g} to the whole run (one factor: "
                "the recorded iterations' operators were not kept apart), and the phases are those of the steps "
                "that recorded them. --torch-ops all records every one")
    return (f"{head}. Each kind's measured iterations stand for its others ({_kinds(sampled)}){_as_ran(sampled)}. "
            "± is a 95 % interval over the iterations measured; a count is exact where every measured iteration "
            "ran as many calls, and marked ~ where not. The phases are those of the steps that recorded them; "
            "--torch-ops all records every one")


def _count(op: TaskStats) -> str:
    return f"~{op.count:,}" if op.count_interval else f"{op.count:,}"


def _interval(op: TaskStats, own: float) -> str:
    """``±4%`` of an estimated time; empty where exact."""
    if op.self_with_library_interval_s is None or not own:
        return ""
    return f"±{op.self_with_library_interval_s / own:.0%}"


def _render_operators(summary: BuiltinSummary, console: Console, operators) -> None:
    if not operators:
        return
    thread_time = summary.thread_time_s
    shown = "" if len(operators) == len(summary.operators) else f", top {len(operators)}"
    sampled = summary.operator_sampling
    estimated = sampled is not None
    if estimated:
        shown += ", estimated from the iterations that recorded them"
    columns = ("operator", "count", "self + oneDNN") + (("±",) if estimated else ()) + (
        "self", "total", "self + oneDNN, % of thread time")
    rows_table = table(f"Top PyTorch operators by self time, oneDNN included{shown}", columns)
    for op in operators:
        own = op.self_with_library_s or op.self_s  # a summary saved before library time was counted
        cells = [literal(op.label or op.name), _count(op), duration(own)] + ([_interval(op, own)] if estimated else []) + [
            duration(op.self_s), duration(op.total_s), f"{own / thread_time:.1%}" if thread_time else ""]
        rows_table.add_row(*cells)
    console.print(rows_table)
    if estimated:
        console.print(f"[dim]{_estimated_note(sampled)}[/dim]")


def _rate(sampling: dict) -> str:
    """How the samples were taken, for the hotspots' title."""
    if sampling.get("mechanism") == "timer":  # CPU-time timers fire at the kernel's tick at most
        return (f"{sampling['rate_hz']} samples a second of each thread's CPU time asked, taken by CPU-time timers "
                "at the scheduler tick's rate at most, each weighted by the time it stands for")
    return f"{sampling['rate_hz']} samples a second of each thread's CPU time"


def _where(spot: Hotspot) -> str:
    return f"{spot.file}:{spot.line}" if spot.file is not None else (spot.library or "")


def short_function(name: str, width: int = _NAME_WIDTH) -> str:
    """A C++ symbol short enough to read in a table: without its return type and parameters, then with its
    template arguments elided, then cut (``--json`` and hotspots.folded keep the whole name)."""
    if len(name) <= width:
        return name
    depth, cut = 0, len(name)
    shortened = name.rstrip()
    if shortened.endswith(" const"):
        shortened = shortened[:-len(" const")]
    if shortened.endswith(")"):
        for i in range(len(shortened) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(shortened[i], 0)
            if depth == 0:
                cut = i
                break
        shortened = shortened[:cut] or shortened
    depth, start = 0, 0
    for i, char in enumerate(shortened):  # the return type ends at the last space outside brackets
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(char, 0)
        if char == " " and depth == 0:
            start = i + 1
    shortened = shortened[start:]
    if len(shortened) > width:
        shortened = elide_templates(shortened)
    return shortened if len(shortened) <= width else shortened[:width - 1] + "…"


def _lines_table(title: str, lines: List[Hotspot], scope_s: float, sources: Dict[str, str]) -> Table:
    """The project's lines, each with its code (read from the original file now: ``sources`` maps the
    project's names of its files to their paths); where a line's thread waited there, its off-CPU time."""
    waited = any(spot.off_cpu_s for spot in lines)
    grid = table(title, ("line", "code", "function", "CPU", "% of that CPU time", "with your lines it calls")
                 + (("waiting (off-CPU, est.)",) if waited else ()))
    grid.columns[0].no_wrap = True
    grid.columns[0].min_width = max((len(_where(spot)) for spot in lines), default=8)
    for column in grid.columns[1:3]:  # text: wraps where the screen is narrow
        column.justify, column.overflow = "left", "fold"
    for spot in lines:
        path = sources.get(spot.file or "")
        code = linecache.getline(path, spot.line).strip() if path and spot.line else ""
        grid.add_row(literal(_where(spot)), literal(code if len(code) <= 40 else code[:39] + "…"),
                     literal(spot.function), duration(spot.self_s), f"{spot.self_s / scope_s:.1%}" if scope_s else "",
                     duration(spot.total_s), *((duration(spot.off_cpu_s) if spot.off_cpu_s else "",) if waited else ()))
    return grid


def _hotspot_table(title: str, rows: List[Hotspot], scope: str) -> Table:
    grid = table(title, ("function", "file:line or library", "self CPU", "total CPU", f"self, % of {scope}"))
    grid.columns[1].justify = "left"
    for spot in rows:
        grid.add_row(literal(short_function(spot.function)), literal(_where(spot)), duration(spot.self_s),
                     duration(spot.total_s), f"{spot.share:.1%}")
    return grid


def _render_hotspots(summary: BuiltinSummary, console: Console, verbose: bool,
                     instrumentation: Optional[Instrumentation]) -> None:
    """Sampled CPU time: the top functions of the collected training, of each step loop's step (every task
    with ``verbose``), and outside collection."""
    sampling = summary.sampling
    if sampling is None:
        return
    # a notebook's lines are those of its program (its code cells as one Python file)
    sources = {f.relative: f.program or f.path for f in instrumentation.files} if instrumentation is not None else {}
    if not sampling.get("samples"):
        reasons = "; ".join(sampling.get("reasons") or []) or "no sample was taken"
        console.print(f"[yellow]note:[/yellow] no CPU-time samples: {literal(reasons)}")
        return
    rows = summary.hotspots if verbose else summary.hotspots[:_TOP_HOTSPOTS]
    if rows:
        console.print(_hotspot_table(
            f"Top hotspots: {duration(sampling.get('collected_cpu_s', 0))} of CPU time sampled during collection "
            f"({_rate(sampling)})", rows, "it"))
    thin = thin_hotspots(sampling)
    if rows and thin:
        console.print(f"[yellow]note:[/yellow] {thin}")
    collected = sampling.get("collected_cpu_s") or 0
    cost = sampling.get("profiling_cpu_s") or 0
    if collected and cost >= 0.005 * collected:
        console.print(f"  profiling's own cost: {duration(cost)} of that CPU time ({cost / collected:.1%}): autoitt's "
                      "markers and collector, and PyTorch's ITT ranges (emit_itt; --torch-ops off leaves them out)")
    lines = summary.hotspot_lines if verbose else summary.hotspot_lines[:_TOP_LINES]
    if lines:
        console.print(_lines_table("Your code: the lines the sampled CPU time was in (the innermost of yours on "
                                   "the stack; what it runs in libraries included)", lines, collected, sources))
        waiting = _waiting_note(sampling, lines)
        if waiting:
            console.print(waiting)
    # a step loop's own list, unless it would repeat the run's (one step loop with nearly all the CPU time)
    steps = {step.label for step in summary.steps}
    by_task = sampling.get("cpu_s_by_task") or {}
    if len(steps) == 1 and collected and by_task.get(next(iter(steps)), 0) >= 0.9 * collected:
        steps = set()
    for task, spots in summary.hotspots_by_task.items():
        if spots and (verbose or task in steps):
            name = literal(task)
            console.print(_hotspot_table(f"Top functions in `{name}`", spots if verbose else spots[:_TOP_IN_TASK],
                                         f"`{name}`'s CPU time"))
    outside_cpu = sampling.get("outside_cpu_s") or 0
    if summary.hotspot_lines_outside:
        console.print(_lines_table(
            f"Outside collection (start-up, imports, data preparation, after the last pause: "
            f"{duration(outside_cpu)} of CPU time): your lines", summary.hotspot_lines_outside[:_TOP_IN_TASK],
            outside_cpu, sources))
    outside = summary.hotspots_outside if verbose else summary.hotspots_outside[:3]
    if outside:
        console.print("  most CPU time of their own outside collection: " + ", ".join(
            f"{literal(short_function(spot.function, 40))} ({literal(_where(spot))}) {duration(spot.self_s)}"
            for spot in outside))
    for reason in sampling.get("reasons") or []:
        console.print(f"[yellow]note:[/yellow] sampling: {literal(reason)}")
    lost = sampling.get("lost") or 0
    if lost > 0.01 * (sampling["samples"] + lost):
        console.print(f"[yellow]note:[/yellow] sampling: about {lost} samples ({100 * lost / (sampling['samples'] + lost):.0f}%) "
                      "were lost while the program had replaced the sampling signal's handler behind autoitt's back")


def _waiting_note(sampling: dict, lines: List[Hotspot]) -> str:
    """How the waiting column was measured, where a line has one."""
    if not any(spot.off_cpu_s for spot in lines):
        return ""
    return (f"  waiting: the time a line's thread was blocked there, off the CPU (a sleep, I/O, a lock, a collective, "
            f"the GIL; not a wait for a busy core), {duration(sampling.get('collected_off_cpu_s') or 0)} in all during "
            "collection; estimated from a look at each blocked Python thread every 50 ms (as py-spy --idle), each "
            "standing for the time since the thread's previous look: close over many looks, rough for a line seen a "
            "few times")


def _render_ranks(summary: BuiltinSummary, console: Console) -> None:
    """Step time per rank, and how far the slowest rank trails the fastest, per step."""
    if not summary.ranks:
        return
    grid = table("Step time per rank", ("rank", "step", "count", "mean", "median", "p95", "first"))
    for rank in summary.ranks:
        for step in rank.steps:
            grid.add_row(str(rank.rank), literal(step.label), str(step.count), duration(step.mean_s),
                         duration(step.median_s), duration(step.p95_s), duration(step.first_s))
    console.print(grid)
    for late in summary.stragglers:
        console.print(f"[bold]Stragglers[/bold] ({literal(late.label)}, {late.steps} steps of ranks "
                      f"{', '.join(map(str, late.ranks))}): the slowest rank trails the fastest by "
                      f"{duration(late.spread_mean_s)} per step on average (at most {duration(late.spread_max_s)}); "
                      f"rank {late.slowest_rank} is the slowest in {late.slowest_count} of {late.steps} steps")
