"""A Jupyter notebook read as one Python program: its code cells, in order, translated.

``autoitt`` instruments Python; a notebook is JSON whose code cells hold
Python and IPython syntax. :func:`read_notebook` reads and validates the
notebook with ``nbformat`` (a broken file is a :class:`~transforms.SourceError`,
exit 2), translates each code cell (:mod:`instrumenter.sources.ipython_syntax`) and
joins them into one program: every cell contributes exactly as many lines as
it has, so a program line is a cell and a line of it (:meth:`Notebook.place`).
The rest of autoitt (detection, the plan, the rewrite with its safety check,
the line map, the launcher) works on that program as on a script; the
notebook copy (:mod:`instrumenter.sources.notebook_copy`) puts the result back into
cells.

A cell's block in the program is its translation when that is line for
line; otherwise (a cell magic, a cell IPython dedents) a one-line
``exec(...)`` of its translation, padded with blank lines, which runs as
IPython would but hides the cell from detection: no marker can land where
it could not be put back. A cell with a top-level ``await`` is such a line
too, which runs the cell as a coroutine to completion (``asyncio.run``, a new
event loop per cell where IPython keeps one). A cell that is not Python even
translated is left out (blank lines), with a note.

``nbformat`` (and IPython, where installed) is imported only here, when a
notebook is given.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

from transforms import SourceError

from .ipython_syntax import Translation, ipython_available, lines_of, translate
from .kind import CellStarts, Place

#: How detection's reasons and notes name a line of the program.
_LINE = re.compile(r"\bline (\d+)\b")


@dataclass(frozen=True)
class Layout:
    """How the notebook's JSON is laid out, to write a copy (and strip it back) in the same bytes.

    ``exact``: dumping the file's own JSON this way gives its bytes back;
    otherwise autoitt writes Jupyter's layout, and ``strip`` gives back the
    same notebook JSON but not the same bytes.
    """

    indent: Optional[int] = 1
    ensure_ascii: bool = False
    final_newline: bool = True
    exact: bool = False

    def dump(self, raw: Any) -> bytes:
        text = json.dumps(raw, indent=self.indent, ensure_ascii=self.ensure_ascii)
        return (text + ("\n" if self.final_newline else "")).encode("utf-8")

    @classmethod
    def of(cls, data: bytes, raw: Any) -> "Layout":
        # Jupyter's own first (indent 1, keys as read: Jupyter sorts them when it saves), then other tools'.
        for indent in (1, 2, 4, None, 0):
            for ensure_ascii in (False, True):
                for final_newline in (True, False):
                    layout = cls(indent, ensure_ascii, final_newline, exact=True)
                    if layout.dump(raw) == data:
                        return layout
        return cls()


@dataclass(frozen=True)
class Cell:
    """One code cell as the program holds it.

    ``index``: its 1-based position among all the notebook's cells (markdown
    included), as messages and ``loops --json`` name it; ``position`` the same,
    0-based, in the JSON ``cells`` list. ``text``: its source, ending in a line
    break (``ends_with_newline`` says whether the file's did). ``start``: the
    program line of its first line.
    """

    index: int
    position: int
    id: Optional[str]
    text: str
    ends_with_newline: bool
    translation: Translation
    start: int
    lines: int

    @property
    def opaque(self) -> bool:
        """No markers can go inside: its translation is not line for line, or it is not Python."""
        return not self.translation.line_for_line

    def name(self) -> str:
        return f"cell {self.index}" + (f" (id {self.id})" if self.id else "")

    def block(self, notebook_name: str) -> str:
        """The cell's lines of the program (see the module docstring)."""
        translation = self.translation
        if translation.error is not None:
            return "\n" * self.lines
        if translation.line_for_line:
            return translation.code
        compiled = f"compile({translation.code!r}, {f'{notebook_name} {self.name()}'!r}, 'exec'"
        if translation.awaits:
            run = (f"__import__('asyncio').run(eval({compiled}, "
                   "flags=__import__('ast').PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)))\n")
        else:
            run = f"exec({compiled}))\n"
        return run + "\n" * (self.lines - 1)


@dataclass(frozen=True)
class Notebook:
    """A notebook, its code cells and the program they make; see the module docstring. With its copy, the
    notebook kind of file (:class:`~instrumenter.sources.notebook_copy.NotebookFile`).

    ``raw``: the file's JSON as read (written back with ``layout``);
    ``program``: the code cells' Python, UTF-8; ``notes``: what the translation
    left out or changed, each naming its cell.
    """

    name: str
    data: bytes
    raw: Any
    layout: Layout
    cells: Tuple[Cell, ...]
    program: bytes
    notes: Tuple[str, ...]
    uses_ipython: bool

    def cell_at(self, program_line: int) -> Optional[Cell]:
        """The code cell holding ``program_line``."""
        at = bisect.bisect_right([cell.start for cell in self.cells], program_line) - 1
        if at < 0:
            return None
        cell = self.cells[at]
        return cell if program_line < cell.start + cell.lines else None

    def place(self, program_line: int) -> Place:
        """The cell and line in it (shown ``cell 3, line 5``, with the cell's id where it has one) of a line of
        the program; outside every code cell, the program's line."""
        cell = self.cell_at(program_line)
        return Place(program_line - cell.start + 1, cell.index, cell.id) if cell else Place(program_line)

    def region_json(self, region) -> dict:
        """``Region.to_json`` with cell-relative lines and the ``cell``: ``{"index": 3, "id": "abc"}``."""
        cell = self.cell_at(region.line)
        data = region.to_json()
        if cell is None:
            return data
        return {**data, "line": region.line - cell.start + 1, "end_line": region.end_line - cell.start + 1,
                "reason": self.relined(region.reason), "cell": {"index": cell.index, "id": cell.id}}

    def note_line(self, where: object, note) -> str:
        """A detection or plan note, named by its cell and line."""
        message = self.relined(note.message)
        return f"{where}, {self.place(note.line)}: {message}" if note.line else f"{where}: {message}"

    def relined(self, text: str) -> str:
        """``text`` (a reason, a note) with each ``line N`` of the program named as its cell's line."""
        return _LINE.sub(lambda match: str(self.place(int(match.group(1)))), text)

    def source(self):
        """The program parsed (:class:`transforms.Source`, named as the notebook); an error names its cell."""
        from transforms import parse_source

        try:
            return parse_source(self.program, self.name)
        except SourceError as exc:
            # Each cell parses alone; together they may not (a `from __future__` import in a later cell).
            where = self.place(exc.line) if exc.line else None
            raise SourceError(self.name, f"{where}: {exc.message}" if where else exc.message) from None

    def runnable(self, code: bytes, line_map):
        """(what ``profile`` runs for the notebook, its line map to the program) for ``code``, the program
        instrumented or not (with ``line_map``).

        A prelude first does what Jupyter has done before a cell runs: the
        notebook's folder as working directory and, where IPython translated
        some of its syntax, an IPython shell whose namespace is the program's
        own (``get_ipython()``, so ``%time x = f()`` sets ``x``). It follows what
        Python wants first in a file (a docstring, ``from __future__`` imports:
        Jupyter allows them in the first cell). Its lines are inserted lines of
        the map, shown as the line they follow (1 at the top).
        """
        from transforms import LineMap

        prelude = [f"__import__('os').chdir({str(Path(self.name).resolve().parent)!r})\n"]
        if self.needs_ipython_at_run():
            prelude.append("from IPython.core.interactiveshell import InteractiveShell as _autoitt_Shell; "
                           "get_ipython = _autoitt_Shell.instance("
                           "user_module=__import__('sys').modules[__name__]).get_ipython\n")
        added = len(prelude)
        after = _first_statements_end(code)
        shown = max(1, after - sum(1 for line, _ in line_map.inserted if line <= after))
        shifted = LineMap(line_map.copy_lines + added, line_map.original_lines,
                          tuple((line, line_shown) for line, line_shown in line_map.inserted if line <= after)
                          + tuple((after + n, shown) for n in range(1, added + 1))
                          + tuple((line + added, line_shown) for line, line_shown in line_map.inserted
                                  if line > after))
        lines = code.splitlines(keepends=True)
        return b"".join(lines[:after]) + "".join(prelude).encode("utf-8") + b"".join(lines[after:]), shifted

    def cell_starts(self) -> CellStarts:
        """(first program line, index, id) of each code cell: ``cells`` in ``instrumentation.json``."""
        return tuple((cell.start, cell.index, cell.id) for cell in self.cells)

    def needs_ipython_at_run(self) -> bool:
        """The program calls ``get_ipython()`` (IPython translated some of its syntax into such calls; a
        ``%%time`` cell's ``pass`` needs no shell, which is slow to start)."""
        return self.uses_ipython and any("get_ipython()" in cell.translation.code for cell in self.cells
                                         if cell.translation.error is None)


def _first_statements_end(code: bytes) -> int:
    """The last line of what must come first in ``code``: its docstring and ``from __future__`` imports
    (0 when there are none)."""
    import ast

    end = 0
    for position, statement in enumerate(ast.parse(code).body):
        docstring = (position == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                     and isinstance(statement.value.value, str))
        if not docstring and not (isinstance(statement, ast.ImportFrom) and statement.module == "__future__"):
            break
        end = statement.end_lineno or statement.lineno
    return end


def read_notebook(data: bytes, name: str, use_ipython: Optional[bool] = None) -> Notebook:
    """Validate ``data`` as a notebook (nbformat 4) and make its program; writes nothing.

    ``use_ipython``: translate with IPython (default: when it is installed).
    Raises :class:`SourceError` for anything that is not a valid notebook.
    """
    raw, node = _validated(data, name)
    if use_ipython is None:
        use_ipython = ipython_available()
    cells: List[Cell] = []
    notes: List[str] = []
    line = 1
    code_cells = [(position, c) for position, c in enumerate(node.cells) if c.cell_type == "code"]
    for position, cell in code_cells:
        source = cell.source
        text = source if source.endswith(("\n", "\r")) or not source else source + "\n"
        translation = translate(text, use_ipython)
        count = len(lines_of(text))
        made = Cell(position + 1, position, cell.get("id"), text, text == source, translation, line, count)
        cells.append(made)
        notes.extend(_notes(made))
        line += count
    program = "".join(cell.block(Path(name).name) for cell in cells)
    return Notebook(name, data, raw, Layout.of(data, raw), tuple(cells), program.encode("utf-8"), tuple(notes),
                    use_ipython)


def _notes(cell: Cell) -> List[str]:
    translation = cell.translation
    notes = [f"{cell.name()}, {note}" for note in translation.notes]
    if translation.error is not None:
        where = f"{cell.name()}, line {translation.error_line}" if translation.error_line else cell.name()
        notes.append(f"{where}: {translation.error}: left out of detection and of the profiled run")
    elif translation.awaits:
        notes.append(f"{cell.name()}: its top-level await makes it a coroutine for Python: it runs as IPython "
                     "runs it, to completion in an event loop, without markers inside")
    elif not translation.line_for_line:
        first = cell.text.split("\n", 1)[0].strip()
        what = f"its {first.split()[0]} cell magic" if first.startswith("%%") else "its IPython syntax"
        notes.append(f"{cell.name()}: {what} makes it one statement for Python: it runs as IPython runs it, "
                     "without markers inside")
    return notes


def _validated(data: bytes, name: str):
    """(the JSON as read, nbformat's node of it), or the :class:`SourceError` saying what is wrong."""
    import warnings

    import nbformat

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(name, f"not a Jupyter notebook: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(name, f"not a Jupyter notebook: invalid JSON: {exc.msg} (column {exc.colno})",
                          exc.lineno) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("nbformat"), int):
        raise SourceError(name, "not a Jupyter notebook: no 'nbformat' version in its JSON")
    if raw["nbformat"] < 4:
        raise SourceError(name, f"nbformat {raw['nbformat']} notebook: autoitt reads nbformat 4 "
                                "(open and save it in Jupyter to upgrade it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbformat warns of missing cell ids, which validation then reports
        try:
            node = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
            nbformat.validate(node)
        except nbformat.ValidationError as exc:
            where = "".join(f"[{p!r}]" for p in getattr(exc, "absolute_path", ()))
            message = getattr(exc, "message", None) or str(exc).splitlines()[0]
            raise SourceError(name, f"not a valid notebook (nbformat validation): {message}"
                                    + (f" at {where}" if where else "")) from None
        except Exception as exc:  # noqa: BLE001 - nbformat raises plain errors for unknown versions
            raise SourceError(name, f"not a valid notebook: {exc}") from None
    return raw, node
