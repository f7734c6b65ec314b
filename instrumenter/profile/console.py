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
    """Names fold onto several lines; a figure is never cut nor wrapped, whatever the width: its column is
    as wide as its widest figure (or its heading's longest word), and its heading wraps within that. Text
    columns give way first. No outer box: a summary of several tables still fits a screen."""
    from rich import box

    made = _figures_table()(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    made.add_column(columns[0], overflow="fold", ratio=1, min_width=16)
    for column in columns[1:]:
        made.add_column(column, justify="right", overflow="fold")
    return made


#: How wide a text column's content may ask to be before figure headings are unwrapped for the room.
_TEXT_ROOM = 40


def _figures_table():
    """rich's Table with its right-justified columns (the figures) fixed at their widest cell when it is
    drawn: rich shares a narrow screen out among all columns, cutting figures with "…" (``20.0…``, ``700…``),
    and ``min_width`` does not stop it; a column of fixed width is never shrunk."""
    from rich.table import Table
    from rich.text import Text

    def width(cell) -> int:
        text = Text.from_markup(cell) if isinstance(cell, str) else cell
        return text.cell_len if isinstance(text, Text) else 0

    class FiguresTable(Table):
        def __rich_console__(self, console, options):
            figures = [c for c in self.columns if c.justify == "right" and c.width is None]
            # each figure column at least its widest cell (and its heading's longest word), at most its whole
            # heading on one line; widened from the least to the full while the text columns keep room
            least = {id(c): max([width(cell) for cell in c._cells] + [len(w) for w in str(c.header).split()] + [1])
                     for c in figures}
            full = {id(c): max(least[id(c)], len(str(c.header))) for c in figures}
            # text columns keep their content's width (up to :data:`_TEXT_ROOM`) before a heading is unwrapped
            text = sum(min(_TEXT_ROOM, max([width(cell) for cell in c._cells] + [1]))
                       for c in self.columns if c not in figures)
            room = options.max_width - text - 3 * len(self.columns) - sum(least.values())
            for column in figures:
                column.width = least[id(column)]
            for column in sorted(figures, key=lambda c: full[id(c)] - least[id(c)]):
                extra = full[id(column)] - least[id(column)]
                if extra <= room:
                    column.width, room = full[id(column)], room - extra
            yield from super().__rich_console__(console, options)

    return FiguresTable


#: The width of what is printed to a file or pipe (CI logs) where ``COLUMNS`` does not say.
PIPE_WIDTH = 120


def console_for_stdout() -> Console:
    """A terminal's own width; to a file or pipe, ``COLUMNS``'s where it is a number, else
    :data:`PIPE_WIDTH`. No emoji codes: a note's ``file.py:100:`` is a file and line, not 💯."""
    import os

    from rich.console import Console

    width = None
    if not sys.stdout.isatty():
        given = os.environ.get("COLUMNS", "")
        width = int(given) if given.isdigit() and int(given) >= 20 else PIPE_WIDTH
    return Console(highlight=False, emoji=False, width=width)


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
