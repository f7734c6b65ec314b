"""``autoitt instrument`` and ``autoitt strip``: where copies go, and writing them.

``instrument`` instruments the script and the local modules it imports
(:mod:`instrumenter.sources.project`), then, by its :class:`~instrumenter.sources.files.WriteBack`,
prints the diff, reports what would change, or writes: the entry script's copy
(``<stem>_itt.py``, ``-o FILE``, or the script itself with ``--in-place``), or
every instrumented file under ``-o DIR/``. ``strip`` writes a copy's original.
Both write through :func:`instrumenter.sources.files.write_outputs` only. A notebook's
copy is a notebook (``nb_itt.ipynb``), its diff one per changed cell.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import click

from transforms import Mode, Outcome, strip_markers

from ..sources import files
from ..sources.files import Output, WriteBack
from ..sources.project import Project, ProjectFile, load_project
from .tally import Tally


def instrument(tally: Tally, script: Path, mode: Mode, write_back: WriteBack, *, output: Optional[str],
               in_place: bool, force: bool, diff_style: str, color: Optional[bool]) -> None:
    """Instrument ``script`` (and its local modules) and do with the copies what ``write_back`` says.

    The copy is ``output`` (a file, or a folder for every instrumented file),
    ``script`` itself when ``in_place``, else ``<stem>_itt.py`` next to it; a
    diff names it as such.
    """
    project = load_project(script, mode)
    result = project.entry.result
    modules = [item for item in project.modules if item.result.outcome is Outcome.INSTRUMENTED]
    for message in project.messages():
        tally.note(message)
    if result.outcome is Outcome.ALREADY_INSTRUMENTED:
        tally.unchanged_file(f"{script}: already instrumented by {result.detection.already_instrumented}; nothing to do")
        return
    if result.outcome is Outcome.NOTHING_TO_DO and not modules:
        tally.unchanged_file(f"{script}: no training loops found; nothing written "
                             "(see `autoitt loops` and the '# autoitt: step' comment)")
        return
    # -o is kept as typed: a trailing slash asks for a folder even before it exists.
    folder = Path(output) if output is not None and (output.endswith(("/", os.sep)) or Path(output).is_dir()) else None
    target = (script if in_place
              else Path(output) if output is not None and folder is None else files.default_output(script))

    def target_of(item: ProjectFile) -> Path:
        if folder is not None:
            return folder / (script.name if item is project.entry else item.relative)
        return target

    if write_back is WriteBack.DIFF:
        for item in project.instrumented:
            shown = target_of(item) if item is project.entry or folder is not None \
                else Path(item.relative + " (instrumented)")
            _print_diff(item, shown, diff_style, color)
    if not write_back.writes:
        summary = "; ".join(f"{item.relative}: {_regions(item)}" for item in project.instrumented) if modules \
            else _regions(project.entry)
        tally.changed_file(f"would instrument {script}: {summary}")
        return
    if folder is not None:
        _write_folder(tally, project, folder, target_of, force)
        return
    if modules:
        names = ", ".join(item.relative for item in modules)
        tally.note(f"{script} imports local modules with training loops too ({names}): -o DIR/ writes every "
                   f"instrumented file, and `autoitt profile {script}` runs them without touching this folder")
    if result.outcome is Outcome.NOTHING_TO_DO:
        tally.unchanged_file(f"{script}: no training loops in the script itself; nothing written")
        return
    files.write_outputs([Output(target, project.entry.copy_bytes(), script, in_place=in_place)], files.COPY,
                        force=force)
    if in_place:
        tally.changed_file(f"rewrote {script} in place (original kept as {files.backup_path(script)}): "
                           f"{_regions(project.entry)}")
        return
    tally.changed_file(f"wrote {target} from {script}: {_regions(project.entry)}")
    if _runs_in_jupyter(project):
        tally.note(f"next: run {target} in Jupyter under VTune, or `autoitt profile {script}`")
        return
    tally.note(f"next: vtune -collect hotspots -start-paused -- {Path(sys.executable).name} {target}")


def _write_folder(tally: Tally, project: Project, folder: Path, target_of, force: bool) -> None:
    """Every instrumented file of the project under ``folder``, at its path relative to the entry's folder."""
    outputs = [Output(target_of(item), item.copy_bytes(), item.path) for item in project.instrumented]
    files.write_outputs(outputs, files.COPIES, force=force)
    for item, written in zip(project.instrumented, outputs):
        tally.changed_file(f"wrote {written.target} from {item.path}: {_regions(item)}")
    entry = project.entry.path
    if _runs_in_jupyter(project):
        tally.note(f"next: run {target_of(project.entry)} in Jupyter with {entry.parent or '.'} importable, "
                   f"or `autoitt profile {entry}`")
        return
    tally.note(f"run it with the other modules of {entry.parent or '.'} importable, e.g. "
               f"PYTHONPATH={entry.parent or '.'} python {target_of(project.entry)}; or use `autoitt profile`")


def _runs_in_jupyter(project: Project) -> bool:
    """The entry's copy is a notebook: the next step the user is told is to run it in Jupyter, not Python."""
    return project.entry.kind.copy_suffix == ".ipynb"


def _regions(item: ProjectFile) -> str:
    return ", ".join(f"{r.role} at {item.place(r.line)}" for r in item.result.regions)


def _print_diff(item: ProjectFile, target: Path, style: str, color: Optional[bool]) -> None:
    from .diff import STYLES, colorize

    text = item.diff(str(item.path), str(target), STYLES[style])
    use_color = sys.stdout.isatty() if color is None else color
    click.echo(colorize(text) if use_color else text, nl=False, color=use_color)


def strip(tally: Tally, copy: Path, write_back: WriteBack, output: Optional[Path], force: bool) -> None:
    """Write (or print) the original of an instrumented ``copy`` (a script or a notebook)."""
    if copy.suffix == ".ipynb":
        from ..sources.notebook_copy import strip_notebook

        original = strip_notebook(files.read_script(copy), str(copy))
    else:
        original = strip_markers(files.read_script(copy), str(copy))
    if write_back is WriteBack.STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(original)
        sys.stdout.buffer.flush()
        return
    in_place = write_back is WriteBack.IN_PLACE
    target = copy if in_place else output
    files.write_outputs([Output(target, original, copy, in_place=in_place)], files.ORIGINAL, force=force)
    tally.changed_file(f"wrote {target}: {copy} without autoitt's markers")
