"""Showing a summary on a terminal: figures as people read them, tables that fit, a console for stdout, and
text from users and traces shown as itself (:func:`printable`, :func:`literal`).

Each backend renders its own summary (``instrumenter.builtin.output.render``,
``instrumenter.vtune.render``) with these. rich is imported where a console or table is made, so
:func:`printable` costs nothing to import (the command line's messages use it).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: Characters never written raw to a terminal or a file meant to be read: C0 controls (newline and tab
#: included: a name is one line), DEL, C1 controls, the line and paragraph separators, the bidirectional
#: embeddings, overrides, isolates and marks (they reorder the text around them), lone surrogates (a file
#: name's undecodable bytes), and the non-characters U+FFFE and U+FFFF (XML forbids them).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                      "\ud800-\udfff\ufffe\uffff]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def table(title: str, columns) -> Table:
    """Names fold onto several lines; figures never wrap. No outer box: a summary of several tables still
    fits a screen."""
    from rich import box
    from rich.table import Table

    made = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    made.add_column(columns[0], overflow="fold", ratio=1, min_width=16)
    for column in columns[1:]:
        made.add_column(column, justify="right", no_wrap=True)
    return made


def console_for_stdout() -> Console:
    """A terminal's own width; 120 columns when printing to a file or pipe (CI logs). No emoji codes: a
    note's ``file.py:100:`` is a file and line, not 💯."""
    from rich.console import Console

    return Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 120)


def printable(text: str) -> str:
    """``text`` with every control character (:data:`_CONTROL`) written as its Python escape (``\\x1b``,
    ``\\n``, ``\\u202e``), so it shows as one line of visible characters and cannot drive the terminal;
    any other text is returned as it is."""
    return _CONTROL.sub(_escaped, text)


def _escaped(match: "re.Match[str]") -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def literal(text: object) -> str:
    """``text`` (a name, path or note from the user or a trace) to place inside rich markup: printable, and
    what would read as markup (``[bold]``) escaped, so it shows exactly as written. (Emoji codes are off in
    autoitt's consoles.)"""
    from rich.markup import escape

    return escape(printable(str(text)))


def readable(name: str) -> str:
    """A file name as text that can be written anywhere: its undecodable bytes (kept by Python as
    surrogates) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def collected_line(elapsed_s: float, collected_s: float) -> str:
    """``(42% of the run)`` after the collected time, when the run's length is known."""
    return f" ({collected_s / elapsed_s:.0%} of the run)" if elapsed_s else ""
