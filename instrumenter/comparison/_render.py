"""A :class:`~._compare.Comparison` on a terminal: the verdict first, then each step loop, its phases, and
what moved most (operators, hotspots, your code), counters and the run's split."""

from __future__ import annotations

from pathlib import Path

from typing import List, Optional

from rich.console import Console

from ..profile.console import duration, literal, table
from ._compare import Change, Comparison, Mover
from ._noise import CONFIDENCE

#: rows of each movers' table on the terminal (the JSON has :data:`~._compare.TOP_MOVERS`)
_ROWS = 8


def render_html(comparison: Comparison) -> str:
    """The comparison as a page that opens offline (``--html OUT``): what the terminal shows, and each step
    loop's phases as paired bars."""
    from ..builtin.output.html import page, summary_html

    return page(f"autoitt compare: {comparison.new.script}", f"autoitt compare of {comparison.new.script}",
                summary_html(lambda console: render(comparison, console)) + _phase_bars(comparison))


def _phase_bars(comparison: Comparison) -> str:
    """Each phase of the compared loop, BASE's bar above NEW's, on one scale."""
    from ..builtin.output.html import html_text

    main = comparison.main
    if main is None or not main.phases:
        return ""
    top = max(max(c.base or 0.0, c.new or 0.0) for c in main.phases.values()) or 1.0
    rows = []
    for name, change in main.phases.items():
        for side, value, colour in (("BASE", change.base, "#999"), ("NEW", change.new, "#4e79a7")):
            width = (value or 0.0) / top * 400
            rows.append(f'<tr><td>{html_text(name) if side == "BASE" else ""}</td><td>{side}</td>'
                        f'<td class="num">{_time(value)}</td><td><span class="bar" style="width:{width:.0f}px;'
                        f'background:{colour}"></span></td></tr>')
    return f"<h2>Phases of {html_text(main.label)}, per step</h2><table>{''.join(rows)}</table>"


def render(comparison: Comparison, console: Console) -> None:
    c = comparison
    # the folders and the verdict on a line each, never folded: what a CI log is searched for
    scripts = (literal(c.new.script) if Path(c.base.script).name == Path(c.new.script).name else
               f"two scripts, BASE {literal(c.base.script)} and NEW {literal(c.new.script)}")
    console.print(f"[bold]autoitt compare[/bold] of {scripts}, {c.new.backend} backend: "
                  f"BASE {literal(c.base.folder)}, NEW {literal(c.new.folder)}", soft_wrap=True)
    style = {"slower": "bold red", "faster": "bold green"}.get(c.main.difference if c.main else "", "bold")
    console.print(f"[{style}]{literal(c.verdict)}[/{style}]", soft_wrap=True)
    for note in c.unmatched:
        console.print(f"  [dim]{literal(note)}[/dim]")
    for step in c.steps:
        name = step.label if step.rank is None else f"{step.label} (rank {step.rank})"
        rows = table(f"Step loop {literal(name)}, {step.steps.base:g} -> {step.steps.new:g} steps: {step.difference}",
                     ["after warm-up", "BASE", "NEW", "delta", "change"])
        for kind, timing in step.timings.items():
            if not (timing.median_s.base or timing.median_s.new):
                continue
            what = "iteration (step + wait)" if kind == "iteration" else "step"
            for figure, change in (("median", timing.median_s), ("p95", timing.p95_s), ("mean", timing.mean_s)):
                rows.add_row(f"{what} {figure}", _time(change.base), _time(change.new), _delta(change),
                             _percent(change))
        console.print(rows)
    main = c.main
    if main is not None:
        console.print(f"  [dim]{literal(_runs(main.timings[main.primary]))}; beyond noise: "
                      f"{literal(main.verdict.how)}[/dim]")
    if main is not None and main.phases:
        phases = table(f"Phases of {literal(main.label)}, per step", ["phase", "BASE", "NEW", "delta"])
        for name, change in main.phases.items():
            phases.add_row(literal(name), _time(change.base), _time(change.new), _delta(change))
        if main.iteration_s.base or main.iteration_s.new:
            phases.add_row("iteration", _time(main.iteration_s.base), _time(main.iteration_s.new),
                           _delta(main.iteration_s))
        console.print(phases)
    per = f"per {c.main.label!r} step" if c.main else "over the run"
    _movers(console, f"Operators that moved most, self time {per}", c.operators)
    _movers(console, f"Hotspots that moved most, CPU time {per}", c.hotspots)
    _movers(console, f"Your code that moved most, CPU and waiting (off-CPU) time {per}", c.lines)
    counted = c.counters.get(main.label) if main is not None else None
    if counted:
        counters = table(f"Counters of {literal(main.label)}", ["counter", "BASE", "NEW", "ratio"])
        for name, change in counted.items():
            counters.add_row(literal(name), _figure(change.base), _figure(change.new), _ratio(change))
        console.print(counters)
    shown = {name: change for name, change in c.run_split.items()
             if abs(change.base or 0.0) > 1e-6 or abs(change.new or 0.0) > 1e-6}
    if shown:
        split = table("The run's wall time", ["part", "BASE", "NEW", "delta"])
        for name, change in shown.items():
            split.add_row(name.removesuffix("_s"), _time(change.base), _time(change.new), _delta(change))
        console.print(split)


def _movers(console: Console, title: str, movers: List[Mover]) -> None:
    if not movers:
        return
    rows = table(title, ["name", "where", "BASE", "NEW", "delta"])
    for mover in movers[:_ROWS]:
        rows.add_row(literal(mover.name), literal(mover.where), _listed(mover.change.base, mover.base_at_most),
                     _listed(mover.change.new, mover.new_at_most),
                     _signed(mover.moved, mover.status in ("entered", "left")))
    console.print(rows)


def _runs(timing) -> str:
    """Each side's runs' steady medians, and where one run, its median's interval."""
    def side(name: str, medians) -> str:
        if len(medians.values_s) == 1 and medians.intervals[0] is not None:
            found = medians.intervals[0]
            return f"{name} {duration(found.low_s)}..{duration(found.high_s)} ({CONFIDENCE:.0%} interval)"
        return f"{name} " + ", ".join(duration(v) for v in medians.values_s)

    return f"steady medians: {side('BASE', timing.base_medians)}; {side('NEW', timing.new_medians)}"


def _listed(seconds: Optional[float], at_most: Optional[float]) -> str:
    """A table's figure; where the table lacks the entry, below its last one, or none at all."""
    if seconds is not None:
        return duration(seconds)
    return f"≤ {duration(at_most)}" if at_most is not None else "[dim]none[/dim]"


def _signed(seconds: float, bound: bool = False) -> str:
    return ("≥ " if bound and seconds >= 0 else "≤ " if bound else "") + ("+" if seconds >= 0 else "-") + duration(
        abs(seconds))


def _time(seconds: Optional[float]) -> str:
    return "-" if seconds is None else duration(seconds)


def _delta(change: Change) -> str:
    return "-" if change.delta is None else _signed(change.delta)


def _percent(change: Change) -> str:
    return "-" if change.ratio is None else f"{(change.ratio - 1) * 100:+.1f} %"


def _figure(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def _ratio(change: Change) -> str:
    return "-" if change.ratio is None else f"{change.ratio:.3f}x"
