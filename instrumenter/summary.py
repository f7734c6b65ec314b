"""The terminal summary of a profile, in the spirit of VTune's Summary window."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from rich.console import Console
from rich.table import Table

from .analysis import TORCH_DOMAIN, Summary, TaskStats

_TOP = 12


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _table(title: str, columns) -> Table:
    """Names fold onto several lines; figures never wrap."""
    table = Table(title=title, title_justify="left")
    table.add_column(columns[0], overflow="fold", ratio=1, min_width=16)
    for column in columns[1:]:
        table.add_column(column, justify="right", no_wrap=True)
    return table


def console_for_stdout() -> Console:
    """A terminal's own width; 120 columns when printing to a file or pipe (CI logs)."""
    import sys

    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _domain_order(tasks: List[TaskStats], own_domain: Optional[str]) -> List[str]:
    domains = sorted({t.domain for t in tasks}, key=lambda d: (d != own_domain, d != TORCH_DOMAIN, d))
    return domains


def render(summary: Summary, console: Console, *, script: str, backend: str, result_dir: Path,
           own_domain: Optional[str]) -> None:
    share = f" ({summary.collected_s / summary.elapsed_s:.0%} of the run)" if summary.elapsed_s else ""
    console.print(f"[bold]autoitt profile[/bold] of {script}, {backend} backend")
    console.print(f"  elapsed {_time(summary.elapsed_s)}; collected (resume..pause) {_time(summary.collected_s)}{share}; "
                  f"{summary.processes} process(es), {summary.threads} thread(s), {summary.events} events")
    if not summary.tasks:
        console.print("[yellow]No ITT tasks were recorded.[/yellow] Either no training region ran, or it never "
                      "resumed collection (see loops.json in the result folder).")

    for domain in _domain_order(summary.tasks, own_domain):
        rows = [t for t in summary.tasks if t.domain == domain]
        rows.sort(key=lambda t: -t.total_s if domain != TORCH_DOMAIN else -t.self_s)
        title = f"Top tasks, domain {domain}" + (f" (top {_TOP} of {len(rows)} by self time)"
                                                if domain == TORCH_DOMAIN and len(rows) > _TOP else "")
        table = _table(title, ("task", "count", "total", "self", "mean", "min", "max", "share"))
        for task in rows[:_TOP] if domain == TORCH_DOMAIN else rows:
            table.add_row(task.name, str(task.count), _time(task.total_s), _time(task.self_s), _time(task.mean_s),
                          _time(task.min_s), _time(task.max_s), f"{task.share:.1%}")
        console.print(table)

    for step in summary.steps:
        ratio = step.first_s / step.steady_mean_s if step.steady_mean_s else 0.0
        console.print(
            f"[bold]Step time[/bold] ({step.label}, {step.count} steps): mean {_time(step.mean_s)}, "
            f"median {_time(step.median_s)}, p95 {_time(step.p95_s)}; first step {_time(step.first_s)} "
            f"vs steady state {_time(step.steady_mean_s)} ({ratio:.1f}x)"
        )

    if summary.operators:
        table = _table("Top PyTorch operators by self time", ("operator", "count", "self", "total", "share"))
        for op in summary.operators:
            table.add_row(op.name, str(op.count), _time(op.self_s), _time(op.total_s), f"{op.share:.1%}")
        console.print(table)

    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print(f"Results in {result_dir}/: trace.json (open in https://ui.perfetto.dev), steps.svg, summary.json; "
                  f"`autoitt report {result_dir}` prints this again.")
