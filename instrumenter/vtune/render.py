"""The VTune backend's summary on a terminal: per analysis and result folder, CPU time per task, top
functions (on the original script's lines), top-down metrics; VTune's errors and what to do; how to open the GUI."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..profile.console import collected_line, duration, literal, table
from .summary import VTuneSummary

_TOP = 12

_FUNCTIONS_SHOWN = 10
_STATUS = {"ok": "done", "failed": "VTune failed", "script-failed": "the script failed", "not-run": "not run"}


def render(summary: VTuneSummary, console: Console, *, script: str, result_dir: Path) -> None:
    """Per analysis: how it went (VTune's errors and what to do), then each result folder's figures."""
    console.print(f"[bold]autoitt profile[/bold] of {literal(script)}, vtune backend ({literal(summary.vtune)})")
    share = collected_line(summary.elapsed_s, summary.collected_s)
    collected = f"; collected (not paused) {duration(summary.collected_s)}{share}" if summary.collected_s else ""
    elapsed = duration(summary.elapsed_s) if summary.elapsed_s is not None else "unknown (the run's end was not recorded)"
    console.print(f"  elapsed {elapsed}{collected}")
    for analysis in summary.analyses:
        run = analysis.run
        where = ", ".join(literal(result_dir / name) for name in run.result_dirs)
        state = _STATUS.get(run.status, run.status)
        if run.status == "script-failed":
            state += f" (exit code {run.script_exit_code})"
        elif run.status == "failed":
            state += f" (vtune exited with code {run.exit_code})" if run.exit_code is not None else ""
        elif run.status == "not-run":
            state += f" ({literal('; '.join(run.hints))})"
        console.print(f"[bold]{literal(run.analysis)}[/bold]: {state}" + (f"; results in {where}" if where else ""))
        for line in run.errors:
            console.print(f"  [red]{literal(line)}[/red]", soft_wrap=True)
        for hint in run.hints if run.status != "not-run" else ():
            console.print(f"  [yellow]what to do:[/yellow] {literal(hint)}")
        for problem in run.report_problems:
            console.print(f"  [yellow]report:[/yellow] {literal(problem)}")
        for result in analysis.results:
            _render_result(console, run.analysis, result)
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {literal(warning)}")
    if summary.gui:
        console.print("Open in the VTune GUI: " + literal("; ".join(summary.gui)))
    folder = literal(result_dir)
    console.print(f"Results in {folder}/: VTune's reports as CSV in {literal(summary.csv_dir)}/, summary.json; "
                  f"`autoitt report {folder}` prints this again.")


def _render_result(console: Console, analysis: str, result) -> None:
    label = literal(f"{analysis}" + (f", rank/host {result.rank}" if result.rank is not None else ""))
    for problem in result.problems:
        console.print(f"  [yellow]{label}:[/yellow] {literal(problem)}")
    if result.cpu_time_s is not None:
        console.print(f"  {label}: CPU time {duration(result.cpu_time_s)}")
    if result.top_down:
        console.print(f"  {label}: top-down, whole run: "
                      + literal(", ".join(f"{name} {value:.1f}%" for name, value in result.top_down.items())))
    if result.bandwidth:
        console.print(f"  {label}: memory bandwidth: "
                      + literal(", ".join(f"{name} {_value(value)}" for name, value in result.bandwidth.items())))
    with_top_down = [task for task in result.tasks if task.top_down]
    rows = with_top_down or result.tasks
    shown = _top_tasks(rows)
    more = f" (top {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
    if with_top_down:
        categories = [c for c in ("Retiring", "Front-End Bound", "Bad Speculation", "Back-End Bound")
                      if any(c in task.top_down for task in with_top_down)]
        memory = "Back-End Bound:Memory Bound(%)"
        show_memory = any(memory in task.columns for task in with_top_down)
        grid = table(f"Top-down per task, {label} (% of pipeline slots){more}",
                     ("task", *categories, *(["Memory Bound"] if show_memory else []), "largest"))
        for task in shown:
            cells = [f"{task.top_down[c]:.1f}" if c in task.top_down else "" for c in categories]
            if show_memory:
                cells.append(_value(task.columns.get(memory)))
            grid.add_row(literal(task.task), *cells, literal(max(task.top_down, key=task.top_down.get)))
        console.print(grid)
    elif result.tasks:
        total = sum(task.cpu_time_s or 0.0 for task in result.tasks)
        grid = table(f"CPU time per task, {label}{more}", ("task", "CPU time", "share"))
        for task in shown:
            cpu = task.cpu_time_s
            grid.add_row(literal(task.task), duration(cpu) if cpu is not None else "",
                         f"{cpu / total:.1%}" if cpu is not None and total else "")
        console.print(grid)
    if result.functions:
        grid = table(f"Top functions by CPU time, {label}", ("function", "module", "source", "CPU time"))
        for row in result.functions[:_FUNCTIONS_SHOWN]:
            source = ""
            if row.source_file:
                source = Path(row.source_file).name + (f":{row.source_line}" if row.source_line else "")
            grid.add_row(literal(row.function), literal(row.module or ""), literal(source),
                         duration(row.cpu_time_s) if row.cpu_time_s is not None else "")
        console.print(grid)


def _top_tasks(tasks: list) -> list:
    """The first tasks (they come heaviest first), and always the time outside any task."""
    shown = tasks[:_TOP]
    return shown + [task for task in tasks[_TOP:] if task.task == "[Outside any task]"]


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return "" if value is None else str(value)
