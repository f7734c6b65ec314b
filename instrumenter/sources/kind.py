"""What kind of file the user gave: a plain script, or a notebook read as a program; each stage asks it.

autoitt detects, plans and rewrites one Python program. A script is that
program; a notebook is JSON whose code cells make it
(:class:`instrumenter.sources.notebook.Notebook`). Everything that differs
between the two is a question to a :class:`FileKind`, asked by the stage
that needs the answer, instead of a branch in each stage:

- :meth:`~FileKind.place`: a line of the program as the user knows it
  (:class:`Place`: ``line 42``, or ``cell 3, line 5``), and with it the
  notes (:meth:`~FileKind.note_line`) and the regions as JSON
  (:meth:`~FileKind.region_json`) of ``loops --json``, ``loops.json`` and
  ``instrumentation.json``;
- :meth:`~FileKind.runnable`: what ``profile`` runs for the program (its line
  map follows);
- :meth:`~FileKind.instrumented`, :meth:`~FileKind.copy_bytes`,
  :meth:`~FileKind.diff`: the copy ``instrument`` writes and its diff;
- ``data`` (the bytes given, whose digest tells an edited file), ``notes``
  (what reading it left out or changed), ``program`` and
  :meth:`~FileKind.cell_starts` (the fields a file record adds for a
  notebook), ``copy_suffix``.

:class:`Script` is the plain kind, here; the notebook is in its own modules,
imported only when a notebook is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Optional, Protocol, Tuple

if TYPE_CHECKING:
    from transforms import LineMap, Region, Result, Source

#: (first program line, cell index, cell id) of each code cell: ``cells`` in ``instrumentation.json``.
CellStarts = Tuple[Tuple[int, int, Optional[str]], ...]

#: A diff style of ``--diff-style``: (before, after, from name, to name) -> unified diff text.
DiffStyle = Callable[[str, str, str, str], str]


@dataclass(frozen=True)
class Place:
    """Where a line of the program is in the file the user gave: ``line`` of the script, or of the code cell
    ``cell`` (its 1-based index among all the notebook's cells, with its ``cell_id`` where it has one).

    ``str()`` is how every message names it: ``line 42``, ``cell 3, line 5``, ``cell 3 (id abc), line 5``.
    """

    line: int
    cell: Optional[int] = None
    cell_id: Optional[str] = None

    def __str__(self) -> str:
        if self.cell is None:
            return f"line {self.line}"
        return f"cell {self.cell}" + (f" (id {self.cell_id})" if self.cell_id else "") + f", line {self.line}"


class FileKind(Protocol):
    """A kind of file the user gave; see the module docstring. Immutable; :meth:`instrumented` gives the kind
    that knows its copy."""

    #: the file's bytes as given (``sha256`` in ``instrumentation.json``)
    data: bytes
    #: what reading it left out or changed, each naming where
    notes: Tuple[str, ...]
    #: the program, when it is not the file itself (a notebook's code cells): written beside the copy, for
    #: tracebacks; ``None`` for a script
    program: Optional[bytes]
    #: the suffix of its instrumented copy (``.py``; a notebook's copy is a notebook)
    copy_suffix: str

    def place(self, line: int) -> Place:
        """Where ``line`` of the program is in the file."""

    def note_line(self, where: object, note) -> str:
        """A detection or plan note: ``where:42: message``, or for a notebook ``where, cell 3, line 5: ...``."""

    def region_json(self, region: "Region") -> dict:
        """A region as ``loops --json`` prints it."""

    def runnable(self, code: bytes, line_map: "LineMap") -> Tuple[bytes, "LineMap"]:
        """(what ``profile`` runs for ``code``, the program instrumented or not, its line map to the program)."""

    def cell_starts(self) -> Optional[CellStarts]:
        """``cells`` in ``instrumentation.json``: ``None`` for a script."""

    def instrumented(self, result: "Result") -> "FileKind":
        """This kind with what ``result`` (the program's rewrite) makes of the file's copy."""

    def copy_bytes(self, result: "Result") -> Optional[bytes]:
        """What ``autoitt instrument`` writes for the file, ``result`` the rewrite of its program."""

    def diff(self, result: "Result", from_name: str, to_name: str, style: DiffStyle) -> str:
        """The diff of an instrumented file to its copy, in ``style``."""


def note_line(where: object, note) -> str:
    """``where:line: message`` for a detection or plan note (``where: message`` without a line)."""
    return f"{where}:{note.line}: {note.message}" if note.line else f"{where}: {note.message}"


@dataclass(frozen=True)
class Script:
    """A plain Python file: it is its own program, and its copy the rewrite's output."""

    source: "Source"
    notes: ClassVar[Tuple[str, ...]] = ()
    program: ClassVar[Optional[bytes]] = None
    copy_suffix: ClassVar[str] = ".py"

    @property
    def data(self) -> bytes:
        return self.source.data

    def place(self, line: int) -> Place:
        return Place(line)

    def note_line(self, where: object, note) -> str:
        return note_line(where, note)

    def region_json(self, region: "Region") -> dict:
        return region.to_json()

    def runnable(self, code: bytes, line_map: "LineMap") -> Tuple[bytes, "LineMap"]:
        return code, line_map

    def cell_starts(self) -> Optional[CellStarts]:
        return None

    def instrumented(self, result: "Result") -> "Script":
        return self

    def copy_bytes(self, result: "Result") -> Optional[bytes]:
        return result.output

    def diff(self, result: "Result", from_name: str, to_name: str, style: DiffStyle) -> str:
        return style(result.source.text, result.output.decode(result.source.encoding), from_name, to_name)
