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
    """autoitt's domains first (the entry script's, then its modules'), then PyTorch, then the rest."""
    return sorted({t.domain for t in tasks},
                  key=lambda d: (d != own_domain, not d.startswith("autoitt."), d != TORCH_DOMAIN, d))


def render(summary: Summary, console: Console, *, script: str, backend: str, result_dir: Path,
           own_domain: Optional[str]) -> None:
    if summary.vtune is not None:
        render_vtune(summary, console, script=script, result_dir=result_dir)
        return
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


_FUNCTIONS_SHOWN = 10
_STATUS = {"ok": "done", "failed": "VTune failed", "script-failed": "the script failed", "not-run": "not run"}


def render_vtune(summary: Summary, console: Console, *, script: str, result_dir: Path) -> None:
    """The VTune backend's summary: per analysis and result folder, CPU time per task, top functions
    (on the original script's lines), top-down metrics; VTune's errors and what to do; how to open the GUI."""
    vtune = summary.vtune
    console.print(f"[bold]autoitt profile[/bold] of {script}, vtune backend ({vtune.vtune})")
    share = f" ({summary.collected_s / summary.elapsed_s:.0%} of the run)" if summary.elapsed_s else ""
    collected = f"; collected (not paused) {_time(summary.collected_s)}{share}" if summary.collected_s else ""
    console.print(f"  elapsed {_time(summary.elapsed_s)}{collected}")
    for analysis in vtune.analyses:
        run = analysis.run
        where = ", ".join(str(result_dir / name) for name in run.result_dirs)
        state = _STATUS.get(run.status, run.status)
        if run.status == "script-failed":
            state += f" (exit code {run.script_exit_code})"
        elif run.status == "failed":
            state += f" (vtune exited with code {run.exit_code})" if run.exit_code is not None else ""
        elif run.status == "not-run":
            state += f" ({'; '.join(run.hints)})"
        console.print(f"[bold]{run.analysis}[/bold]: {state}" + (f"; results in {where}" if where else ""))
        for line in run.errors:
            console.print(f"  [red]{line}[/red]", soft_wrap=True)
        for hint in run.hints if run.status != "not-run" else ():
            console.print(f"  [yellow]what to do:[/yellow] {hint}")
        for problem in run.report_problems:
            console.print(f"  [yellow]report:[/yellow] {problem}")
        for result in analysis.results:
            _render_result(console, run.analysis, result)
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if vtune.gui:
        console.print("Open in the VTune GUI: " + "; ".join(vtune.gui))
    console.print(f"Results in {result_dir}/: VTune's reports as CSV in {vtune.csv_dir}/, summary.json; "
                  f"`autoitt report {result_dir}` prints this again.")


def _render_result(console: Console, analysis: str, result) -> None:
    label = f"{analysis}" + (f", rank/host {result.rank}" if result.rank is not None else "")
    for problem in result.problems:
        console.print(f"  [yellow]{label}:[/yellow] {problem}")
    if result.cpu_time_s is not None:
        console.print(f"  {label}: CPU time {_time(result.cpu_time_s)}")
    if result.top_down:
        console.print(f"  {label}: top-down, whole run: "
                      + ", ".join(f"{name} {value:.1f}%" for name, value in result.top_down.items()))
    if result.bandwidth:
        console.print(f"  {label}: memory bandwidth: "
                      + ", ".join(f"{name} {_value(value)}" for name, value in result.bandwidth.items()))
    with_top_down = [task for task in result.tasks if task.top_down]
    rows = with_top_down or result.tasks
    shown = _top_tasks(rows)
    more = f" (top {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
    if with_top_down:
        categories = [c for c in ("Retiring", "Front-End Bound", "Bad Speculation", "Back-End Bound")
                      if any(c in task.top_down for task in with_top_down)]
        memory = "Back-End Bound:Memory Bound(%)"
        show_memory = any(memory in task.columns for task in with_top_down)
        table = _table(f"Top-down per task, {label} (% of pipeline slots){more}",
                       ("task", *categories, *(["Memory Bound"] if show_memory else []), "largest"))
        for task in shown:
            cells = [f"{task.top_down[c]:.1f}" if c in task.top_down else "" for c in categories]
            if show_memory:
                cells.append(_value(task.columns.get(memory)))
            table.add_row(task.task, *cells, max(task.top_down, key=task.top_down.get))
        console.print(table)
    elif result.tasks:
        total = sum(task.cpu_time_s or 0.0 for task in result.tasks)
        table = _table(f"CPU time per task, {label}{more}", ("task", "CPU time", "share"))
        for task in shown:
            cpu = task.cpu_time_s
            table.add_row(task.task, _time(cpu) if cpu is not None else "",
                          f"{cpu / total:.1%}" if cpu is not None and total else "")
        console.print(table)
    if result.functions:
        table = _table(f"Top functions by CPU time, {label}", ("function", "module", "source", "CPU time"))
        for row in result.functions[:_FUNCTIONS_SHOWN]:
            source = ""
            if row.source_file:
                source = Path(row.source_file).name + (f":{row.source_line}" if row.source_line else "")
            table.add_row(row.function, row.module or "", source,
                          _time(row.cpu_time_s) if row.cpu_time_s is not None else "")
        console.print(table)


def _top_tasks(tasks: list) -> list:
    """The first tasks (they come heaviest first), and always the time outside any task."""
    shown = tasks[:_TOP]
    return shown + [task for task in tasks[_TOP:] if task.task == "[Outside any task]"]


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return "" if value is None else str(value)
