"""The built-in backend's summary on a terminal, in the spirit of VTune's Summary window.

One screen by default: the run's header and where it went, each step loop's
time and phases, the top operators, the notes. ``--verbose`` adds the task
tables of every domain and the full operator list; the JSON has everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from rich.console import Console

from ..console import collected_line, duration, table
from ..instrumentation import Instrumentation
from ..summary import StepStats, Summary, TaskStats
from .notes import notes
from .taskstats import TORCH_DOMAIN

#: Rows of the PyTorch domain's table (``--verbose``), and operators shown without it.
_TOP = 12
_TOP_OPERATORS = 8
#: Width of a phase's bar at a share of 100 %.
_BAR = 30


def _operator(task: TaskStats) -> bool:
    return task.name.startswith(("aten::", "autograd::"))


def _domain_order(tasks: List[TaskStats], own_domain: Optional[str]) -> List[str]:
    """autoitt's domains first (the entry script's, then its modules'), then PyTorch, then the rest."""
    return sorted({t.domain for t in tasks},
                  key=lambda d: (d != own_domain, not d.startswith("autoitt."), d != TORCH_DOMAIN, d))


def render(summary: Summary, console: Console, *, script: str, result_dir: Path,
           instrumentation: Optional[Instrumentation], verbose: bool = False) -> None:
    """Header, where the run went, step loops with their phases, top operators, notes, and the files."""
    own_domain = instrumentation.domain if instrumentation is not None else None
    share = collected_line(summary.elapsed_s, summary.collected_s)
    console.print(f"[bold]autoitt profile[/bold] of {script}, builtin backend")
    console.print(f"  elapsed {duration(summary.elapsed_s)}; collected (resume..pause) "
                  f"{duration(summary.collected_s)}{share}; {summary.processes} process(es), "
                  f"{summary.threads} thread(s), {summary.events} events")
    split = summary.run_split
    if split and summary.elapsed_s > 0:
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
        _render_steps(step, console)
    _render_ranks(summary, console)
    _render_operators(summary, console, summary.operators if verbose else summary.operators[:_TOP_OPERATORS])

    for note in notes(summary, instrumentation):
        console.print(f"[yellow]note:[/yellow] {note}")
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if summary.trace_window:
        console.print(f"[dim]{summary.trace_window}[/dim]")
    console.print(f"Results in {result_dir}/: trace.json (open in https://ui.perfetto.dev), steps.svg, summary.json; "
                  f"`autoitt report {result_dir}` prints this again"
                  + ("." if verbose else ", with --verbose every task table."))


def _render_domains(summary: Summary, console: Console, own_domain: Optional[str], all_domains: bool) -> None:
    """Top tasks per domain (the own domain only, unless ``all_domains``); PyTorch's without its operators."""
    for domain in _domain_order(summary.tasks, own_domain):
        if not all_domains and domain != own_domain:
            continue
        # the operators have their own table
        rows = [t for t in summary.tasks if t.domain == domain and not (domain == TORCH_DOMAIN and _operator(t))]
        if not rows:
            continue
        rows.sort(key=lambda t: -t.total_s if domain != TORCH_DOMAIN else -t.self_s)
        title = f"Top tasks, domain {domain}" + (f" (top {_TOP} of {len(rows)} by self time)"
                                                if domain == TORCH_DOMAIN and len(rows) > _TOP else "")
        rows_table = table(title, ("task", "count", "total", "self", "mean", "min", "max", "total, % of thread time"))
        for task in rows[:_TOP] if domain == TORCH_DOMAIN else rows:
            rows_table.add_row(task.name, str(task.count), duration(task.total_s), duration(task.self_s),
                               duration(task.mean_s), duration(task.min_s), duration(task.max_s), f"{task.share:.1%}")
        console.print(rows_table)


def _render_steps(step: StepStats, console: Console) -> None:
    """One step loop: its time, warm-up and steady state, then its phases as bars."""
    steady = step.steady_median_s or step.median_s  # a summary saved before warm-up was detected
    if step.warmup_steps:
        settled = (f"warm-up {step.warmup_steps} step{'s' if step.warmup_steps > 1 else ''} "
                   f"({duration(step.warmup_s)}), then median {duration(steady)}, p95 "
                   f"{duration(step.steady_p95_s)}, mean {duration(step.steady_mean_s)}")
    else:
        settled = f"no warm-up; first step {duration(step.first_s)}"
    if step.first_step > 1:
        settled += f" (counted from step {step.first_step}, the first collected: --skip-steps)"
    console.print(
        f"[bold]Step time[/bold] ({step.label}, {step.count} steps): median {duration(step.median_s)}, "
        f"p95 {duration(step.p95_s)}, mean {duration(step.mean_s)}; {settled}"
    )
    if not step.phases:
        return
    over = f"the {step.phase_steps} steady steps" if step.phase_steps else "every step"
    grid = table(f"Phases of `{step.label}`, per step, over {over} (data: waiting for the batch, between steps)",
                 ("phase", "per step", "share", "share of the step loop's time"))
    for name, phase in step.phases.items():
        if phase["share"] < 0.005:
            continue
        bar = "█" * round(phase["share"] * _BAR)
        grid.add_row(name, duration(phase["seconds_per_step"]), f"{phase['share']:.0%}", bar.ljust(_BAR))
    grid.columns[-1].justify = "left"
    console.print(grid)


def _render_operators(summary: Summary, console: Console, operators) -> None:
    if not operators:
        return
    thread_time = summary.thread_time_s
    shown = "" if len(operators) == len(summary.operators) else f", top {len(operators)}"
    rows_table = table(f"Top PyTorch operators by self time, oneDNN included{shown}",
                       ("operator", "count", "self + oneDNN", "self", "total", "self + oneDNN, % of thread time"))
    for op in operators:
        own = op.self_with_library_s or op.self_s  # a summary saved before library time was counted
        rows_table.add_row(op.name, str(op.count), duration(own), duration(op.self_s), duration(op.total_s),
                           f"{own / thread_time:.1%}" if thread_time else "")
    console.print(rows_table)


def _render_ranks(summary: Summary, console: Console) -> None:
    """Step time per rank, and how far the slowest rank trails the fastest, per step."""
    if not summary.ranks:
        return
    grid = table("Step time per rank", ("rank", "step", "count", "mean", "median", "p95", "first"))
    for rank in summary.ranks:
        for step in rank.steps:
            grid.add_row(str(rank.rank), step.label, str(step.count), duration(step.mean_s), duration(step.median_s),
                         duration(step.p95_s), duration(step.first_s))
    console.print(grid)
    for late in summary.stragglers:
        console.print(f"[bold]Stragglers[/bold] ({late.label}, {late.steps} steps of ranks "
                      f"{', '.join(map(str, late.ranks))}): the slowest rank trails the fastest by "
                      f"{duration(late.spread_mean_s)} per step on average (at most {duration(late.spread_max_s)}); "
                      f"rank {late.slowest_rank} is the slowest in {late.slowest_count} of {late.steps} steps")
