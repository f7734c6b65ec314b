"""Showing a summary on a terminal: figures as people read them, tables that fit, a console for stdout.

Each backend renders its own summary (``instrumenter.builtin.render``,
``instrumenter.vtune.render``) with these.
"""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console
from rich.table import Table


def duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def table(title: str, columns) -> Table:
    """Names fold onto several lines; figures never wrap. No outer box: a summary of several tables still
    fits a screen."""
    made = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    made.add_column(columns[0], overflow="fold", ratio=1, min_width=16)
    for column in columns[1:]:
        made.add_column(column, justify="right", no_wrap=True)
    return made


def console_for_stdout() -> Console:
    """A terminal's own width; 120 columns when printing to a file or pipe (CI logs)."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def readable(name: str) -> str:
    """A file name as text that can be written anywhere: its undecodable bytes (kept by Python as
    surrogates) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def collected_line(elapsed_s: float, collected_s: float) -> str:
    """``(42% of the run)`` after the collected time, when the run's length is known."""
    return f" ({collected_s / elapsed_s:.0%} of the run)" if elapsed_s else ""
