"""The instrumented copy of a notebook is a notebook, and ``strip`` gives the original back.

:func:`instrumented_notebook` puts the instrumented program (a
:class:`transforms.Result` over :attr:`Notebook.program`) back into cells.
Its line map says, for every line of the copy, which program line it is (or
is shown as, for an inserted one), so which cell it belongs to: the copy's
cells are the original cells with the marker lines inside, the lines IPython
translated put back as they were (at their new indentation), and every cell
id, metadata, output and markdown cell untouched. The header (imports, the
domain) lands where the program has it, after the leading imports: at the
end of the cell holding the last of them (so in the first code cell when it
holds only imports), else at the start of the next cell, or in a new cell
before that cell when it begins with a cell magic (which must stay its first
line) or has no markers.

:func:`strip_notebook` is the inverse: the copy's cells as a program again,
a statement between cells saying where each ends, autoitt's own ``strip`` over
it, and the cells cut out again. Every copy is checked to strip back to the
original notebook (the same bytes, when its JSON layout is one autoitt
writes) before anything is written.

:class:`NotebookFile` is the notebook kind of file the stages ask
(:class:`~instrumenter.sources.kind.FileKind`): the notebook read and, once
instrumented, its copy.
"""

from __future__ import annotations

import copy as deep
import secrets
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional, Tuple

from transforms import INSTRUMENTED_MARKER, Outcome, RewriteError, SourceError, strip_markers

from .ipython_syntax import lines_of
from .kind import CellStarts, DiffStyle, Place
from .notebook import Cell, Notebook, read_notebook

#: The id of the code cell autoitt adds for the header when the first cell cannot take it.
HEADER_CELL_ID = "autoitt-header"


@dataclass(frozen=True)
class CellChange:
    """One code cell the copy changes, named as in messages (or ``new cell before ...``, the header's)."""

    name: str
    before: str
    after: str


@dataclass(frozen=True)
class NotebookCopy:
    """The copy's bytes and the cells it changed, in notebook order (for ``--diff``)."""

    data: bytes
    changes: Tuple[CellChange, ...]


@dataclass(frozen=True)
class NotebookFile:
    """The notebook kind of file (:class:`~instrumenter.sources.kind.FileKind`): the :class:`Notebook` read,
    which says how its program's lines are shown and what runs, and its instrumented ``copy`` (once
    :meth:`instrumented` is given a rewrite that added markers), which is what ``instrument`` writes."""

    notebook: Notebook
    copy: Optional[NotebookCopy] = None
    #: the instrumented copy of a notebook is a notebook
    copy_suffix: ClassVar[str] = ".ipynb"

    @property
    def data(self) -> bytes:
        return self.notebook.data

    @property
    def notes(self) -> Tuple[str, ...]:
        return self.notebook.notes

    @property
    def program(self) -> bytes:
        return self.notebook.program

    def place(self, line: int) -> Place:
        return self.notebook.place(line)

    def note_line(self, where: object, note) -> str:
        return self.notebook.note_line(where, note)

    def region_json(self, region) -> dict:
        return self.notebook.region_json(region)

    def runnable(self, code: bytes, line_map):
        return self.notebook.runnable(code, line_map)

    def cell_starts(self) -> CellStarts:
        return self.notebook.cell_starts()

    def instrumented(self, result) -> "NotebookFile":
        """With the notebook's copy, when ``result`` (over :attr:`Notebook.program`) added markers."""
        if result.outcome is not Outcome.INSTRUMENTED:
            return self
        return NotebookFile(self.notebook, instrumented_notebook(self.notebook, result))

    def copy_bytes(self, result) -> Optional[bytes]:
        """The instrumented notebook; without one (no markers added), ``result``'s output."""
        return self.copy.data if self.copy is not None else result.output

    def diff(self, result, from_name: str, to_name: str, style: DiffStyle) -> str:
        """One diff per cell the copy changed (see :func:`cell_diffs`)."""
        return cell_diffs(self.copy.changes if self.copy is not None else (), from_name, to_name, style)


def instrumented_notebook(notebook: Notebook, result) -> NotebookCopy:
    """The notebook with the instrumented program (``result``, a :class:`transforms.Result` over
    :attr:`Notebook.program`) put back into its cells; checked to strip back to the original. Raises
    :class:`RewriteError` (autoitt's bug) when a line cannot be placed or the check fails."""
    line_map = result.line_map
    copy_lines = lines_of(result.output.decode("utf-8"))
    texts: Dict[int, List[str]] = {cell.position: [] for cell in notebook.cells}
    header_lines = _header_lines(result, copy_lines)
    holder = _header_holder(notebook, line_map, header_lines)
    header: List[str] = []
    header_before: Optional[Cell] = None
    order: List[int] = []
    for number, line in enumerate(copy_lines, start=1):
        program_line = line_map.original_line(number)
        cell = holder if number in header_lines and holder is not None else notebook.cell_at(program_line)
        if cell is None:
            raise RewriteError(f"{notebook.name}: line {number} of the instrumented program is in no cell")
        # An opaque cell's program line is an exec() of its code, or blank lines: markers go around statements,
        # so only header lines can be shown in it, and they go before it, in their own cell.
        if (number in header_lines and holder is None) or (cell.opaque and line_map.is_inserted(number)):
            header.append(line)
            header_before = header_before or cell
            continue
        if cell.opaque:
            continue
        if not line_map.is_inserted(number):
            line = _put_back(cell, program_line - cell.start, line)
        texts[cell.position].append(line)
        order.append(cell.position)
    if order != sorted(order):
        raise RewriteError(f"{notebook.name}: the instrumented program does not split back into its cells")
    raw = deep.deepcopy(notebook.raw)
    changes: List[CellChange] = []
    for cell in notebook.cells:
        if cell.opaque:
            continue
        after = "".join(texts[cell.position])
        if not cell.ends_with_newline:
            after = after[:-1] if after.endswith("\n") else after
        before = raw["cells"][cell.position]["source"]
        before_text = "".join(before) if isinstance(before, list) else before
        if after == before_text:
            continue
        raw["cells"][cell.position]["source"] = _source_like(before, after)
        changes.append(CellChange(cell.name(), before_text, after))
    if header:
        text = "".join(header)
        raw["cells"].insert(header_before.position, _header_cell(raw, text))
        changes.insert(0, CellChange(f"new cell before {header_before.name()}", "", text))
    data = notebook.layout.dump(raw)
    _check(notebook, data)
    return NotebookCopy(data, tuple(changes))


def _header_lines(result, copy_lines: List[str]) -> range:
    """The copy lines of the header: the first lines inserted, as many as the rewrite writes for the plan's
    imports and header statements, with the blank line and ``INSTRUMENTED_MARKER`` comment between them."""
    plan = result.plan
    if not result.line_map.inserted:
        return range(0)
    first = result.line_map.inserted[0][0]
    header = range(first, first + len(plan.imports) + 2 + len(plan.header))
    comment = first + len(plan.imports) + 1
    if comment > len(copy_lines) or not copy_lines[comment - 1].startswith(INSTRUMENTED_MARKER):
        # Not the header the rewrite is known to write: lines stay in the cells they are shown in.
        return range(0)
    return header


def _header_holder(notebook: Notebook, line_map, header: range) -> Optional[Cell]:
    """The cell the header lines go in; ``None``: a new cell, before the cell the header precedes."""
    if not header:
        return None
    before = header.start - 1
    if before >= 1 and not line_map.is_inserted(before):
        previous = notebook.cell_at(line_map.original_line(before))
        if previous is not None and not previous.opaque:
            return previous  # after the leading imports, in their cell: the first code cell for most notebooks
    following = notebook.cell_at(line_map.original_line(header.start))
    if following is None or following.opaque or following.text.lstrip().startswith("%%"):
        return None
    return following


def _put_back(cell: Cell, offset: int, line: str) -> str:
    """A program line of ``cell`` as the cell has it: its IPython syntax back, at the copy's indentation."""
    if offset not in cell.translation.changed:
        return line
    original = lines_of(cell.text)[offset]
    translated = lines_of(cell.translation.code)[offset]
    indent = line[: len(line) - len(translated.lstrip(" \t"))]
    return indent + original.lstrip(" \t")


def _source_like(before, text: str):
    """``text`` in the form the cell's ``source`` had: a list of lines (Jupyter's) or one string."""
    return lines_of(text) if isinstance(before, list) else text


def _header_cell(raw, text: str) -> dict:
    cell = {"cell_type": "code", "execution_count": None}
    if any("id" in c for c in raw["cells"]):
        cell["id"] = HEADER_CELL_ID
    cell.update({"metadata": {}, "outputs": [], "source": lines_of(text)})
    return cell


def _check(notebook: Notebook, data: bytes) -> None:
    """The copy strips back to the original: its bytes, or its JSON where the layout is not autoitt's to copy."""
    try:
        stripped = strip_notebook(data, notebook.name, use_ipython=notebook.uses_ipython)
    except SourceError as exc:  # the copy is autoitt's own: a strip error here is autoitt's bug, not the user's
        raise RewriteError(f"{notebook.name}: safety check failed: the copy does not strip: {exc.message}; "
                           "nothing was written") from None
    if stripped == notebook.data:
        return
    if not notebook.layout.exact and read_notebook(stripped, notebook.name).raw == notebook.raw:
        return
    raise RewriteError(f"{notebook.name}: safety check failed: removing the markers does not give back the "
                       "original notebook; nothing was written")


def strip_notebook(data: bytes, name: str, use_ipython: Optional[bool] = None) -> bytes:
    """The original of an instrumented notebook copy (see the module docstring).

    Raises :class:`SourceError` when ``data`` is not a notebook, not an autoitt
    copy, or its markers were edited by hand.
    """
    copy = read_notebook(data, name, use_ipython)
    nonce = secrets.token_hex(8)
    # A statement, not a comment: a comment would become the leading line of the next statement, and go
    # with it where that is the header.
    end = f"_autoitt_cell_end_{nonce}\n"
    blocks = []
    starts = {}  # program line -> cell, to name the cell of an error
    line = 1
    for cell in copy.cells:
        block = _strippable(cell, nonce)
        starts[line] = cell
        blocks.append(block + end)
        line += len(lines_of(block)) + 1
    try:
        stripped = strip_markers("".join(blocks).encode("utf-8"), name).decode("utf-8")
    except SourceError as exc:
        raise SourceError(name, _in_cell(exc, starts)) from None
    pieces = stripped.split(end)
    if len(pieces) != len(copy.cells) + 1:
        raise SourceError(name, "its cells do not strip apart (was the copy edited by hand?)")
    raw = deep.deepcopy(copy.raw)
    header_cells = []
    for cell, piece in zip(copy.cells, pieces):
        if cell.opaque:
            continue  # no markers inside: as it is
        text = _restore(cell, piece, nonce)
        if not cell.ends_with_newline:
            text = text[:-1] if text.endswith("\n") else text
        before = raw["cells"][cell.position]["source"]
        if text == ("".join(before) if isinstance(before, list) else before):
            continue
        if not text and cell.text.strip():
            header_cells.append(cell.position)  # the header cell autoitt added
            continue
        raw["cells"][cell.position]["source"] = _source_like(before, text)
    for position in reversed(header_cells):
        del raw["cells"][position]
    return copy.layout.dump(raw)


def _strippable(cell: Cell, nonce: str) -> str:
    """The cell as Python ``strip`` can read: a placeholder name for each line IPython translated."""
    if cell.opaque:
        return "\n" * cell.lines
    translated = lines_of(cell.translation.code)
    for offset in cell.translation.changed:
        line = translated[offset]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        translated[offset] = f"{indent}_autoitt_line_{nonce}_{offset}\n"
    return "".join(translated)


def _restore(cell: Cell, piece: str, nonce: str) -> str:
    """The stripped cell with its IPython syntax back in place of the placeholders."""
    originals = lines_of(cell.text)
    mark = f"_autoitt_line_{nonce}_"
    lines = lines_of(piece)
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(mark):
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            lines[number] = indent + originals[int(stripped[len(mark):])].lstrip(" \t")
    return "".join(lines)


def _in_cell(exc: SourceError, starts: Dict[int, Cell]) -> str:
    """A strip error's message, its program line named as the cell's line."""
    if not exc.line:
        return exc.message
    start = max(s for s in starts if s <= exc.line)
    return f"{starts[start].name()}, line {exc.line - start + 1}: {exc.message}"


def cell_diffs(changes: Tuple[CellChange, ...], from_name: str, to_name: str, style) -> str:
    """One diff per changed cell, named ``NOTEBOOK cell N``, in the ``style`` of ``--diff-style``."""
    return "".join(style(change.before, change.after, f"{from_name} {change.name}", f"{to_name} {change.name}")
                   for change in changes)
