"""Whole projects: the entry script and the modules of its own folder tree that it imports.

Training code often lives next to the entry script (``from trainer import
train_one_epoch``). Starting from the entry script, every import that
resolves to a ``.py`` file under the entry's folder is followed (absolute
imports from that folder, relative imports inside its packages, aliases
alike); installed packages are never touched. Each file is instrumented on
its own; only the entry script's regions control collection when it has any
(see ``controls_collection`` in :func:`transforms.instrument`). Each file is
read and parsed once, here, and handed to the instrumenter as parsed.

Every file travels with its kind (:class:`~instrumenter.sources.kind.FileKind`),
which the later stages ask how to show its lines, what runs and what its copy
is: a plain :class:`~instrumenter.sources.kind.Script`, or, for a Jupyter
notebook as the entry, a :class:`~instrumenter.sources.notebook_copy.NotebookFile`:
the notebook read as the program its code cells make
(:mod:`instrumenter.sources.notebook`), whose instrumented copy is a notebook
again (:mod:`instrumenter.sources.notebook_copy`), made and checked here with the
rest.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from transforms import Mode, Outcome, Result, Source, SourceError, instrument, parse_source

from . import files
from .kind import FileKind, Place, Script

#: A project larger than this is cut short with a note: it is not a training script's folder.
MAX_FILES = 200


@dataclass(frozen=True)
class ProjectFile:
    """One instrumented file: ``relative`` to the entry's folder, as ``path`` on disk; ``kind``, what kind of
    file it is (knowing its copy: see :meth:`FileKind.instrumented`), whose program ``result`` is about."""

    path: Path
    relative: str
    module: Optional[str]
    result: Result
    kind: FileKind

    def copy_bytes(self) -> Optional[bytes]:
        """What ``autoitt instrument`` writes for this file: the copy (for a notebook, a notebook)."""
        return self.kind.copy_bytes(self.result)

    def note_line(self, where: object, note) -> str:
        return self.kind.note_line(where, note)

    def place(self, line: int) -> Place:
        """Where ``line`` of the program is: shown ``line 42``, or in a notebook ``cell 3, line 5``."""
        return self.kind.place(line)

    def diff(self, from_name: str, to_name: str, style) -> str:
        """The diff of this instrumented file to its copy named ``to_name``, in ``style``."""
        return self.kind.diff(self.result, from_name, to_name, style)


@dataclass(frozen=True)
class Project:
    """The entry and its local modules, instrumented; ``start_paused``: whether collection starts paused (a
    copy resumes it), decided once, by :func:`load_project`, with the rewrite of the files (see
    :func:`_collection`)."""

    entry: ProjectFile
    modules: Tuple[ProjectFile, ...]
    notes: Tuple[str, ...]
    start_paused: bool

    def messages(self) -> List[str]:
        """Every file's notes (the entry named as given, modules by relative path), then the project's."""
        lines = [item.note_line(item.path if item is self.entry else item.relative, note)
                 for item in self.files for note in item.result.plan.notes]
        return [*lines, *self.notes]

    @property
    def files(self) -> Tuple[ProjectFile, ...]:
        return (self.entry, *self.modules)

    @property
    def instrumented(self) -> List[ProjectFile]:
        return [f for f in self.files if f.result.outcome is Outcome.INSTRUMENTED]


def _module_file(root: Path, dotted_name: str) -> Optional[Path]:
    parts = dotted_name.split(".")
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path, root: Path) -> List[str]:
    """The package parts of ``path`` relative to ``root`` (``pkg/sub/mod.py`` -> ``[pkg, sub]``)."""
    parts = list(path.relative_to(root).parent.parts)
    return parts


def _imported_files(tree: ast.Module, path: Path, root: Path) -> Iterator[Tuple[Path, str]]:
    """(file, module name) for each import of ``tree`` that names a file under ``root``."""
    for node in ast.walk(tree):
        names: List[str] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names.extend(".".join(parts[: i + 1]) for i in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(path, root)  # for __init__.py: the package itself
                keep = len(package) - (node.level - 1)
                if keep < 0:
                    continue
                base = package[:keep]
            else:
                base = []
            module = [*base, *(node.module.split(".") if node.module else [])]
            if module:
                names.extend(".".join(module[: i + 1]) for i in range(len(module)))
            for alias in node.names:
                if alias.name != "*":
                    names.append(".".join([*module, alias.name]))
        for name in names:
            found = _module_file(root, name)
            if found is not None:
                yield found, name


@dataclass(frozen=True)
class LocalFile:
    """A file of the project as found: where, under which module name, parsed."""

    path: Path
    relative: str
    module: Optional[str]
    source: Source
    kind: FileKind


def _read_entry(entry: Path) -> LocalFile:
    data = files.read_script(entry)
    if entry.suffix != ".ipynb":
        source = parse_source(data, str(entry))
        return LocalFile(entry, entry.name, None, source, Script(source))
    from .notebook import read_notebook  # nbformat only when a notebook is given
    from .notebook_copy import NotebookFile

    notebook = read_notebook(data, str(entry))
    return LocalFile(entry, entry.name, None, notebook.source(), NotebookFile(notebook))


def discover(entry: Path) -> Tuple[List[LocalFile], List[str]]:
    """The entry script (or notebook) and every local module it imports, transitively; (files, notes)."""
    root = entry.resolve().parent
    first = _read_entry(entry)
    found: List[LocalFile] = [first]
    notes: List[str] = [f"{entry}, {note}" for note in first.kind.notes]
    seen = {entry.resolve()}
    queue = [(entry.resolve(), first.source.tree)]
    while queue:
        path, tree = queue.pop(0)
        for module_file, name in _imported_files(tree, path, root):
            resolved = module_file.resolve()
            if resolved in seen:
                continue
            if len(seen) >= MAX_FILES:
                notes.append(f"more than {MAX_FILES} local modules: the rest are not followed")
                return found, notes
            seen.add(resolved)
            relative = resolved.relative_to(root).as_posix()
            try:
                source = parse_source(files.read_script(module_file), relative)
            except SourceError as exc:
                notes.append(f"{relative}: not followed: {exc.message}")
                continue
            found.append(LocalFile(module_file, relative, name, source, Script(source)))
            queue.append((resolved, source.tree))
    return found, notes


def load_project(entry: Path, mode: Mode) -> Project:
    """Instrument ``entry`` and the local modules it imports (transitively); writes nothing."""
    local, notes = discover(entry)
    first = local[0]
    entry_result = instrument(first.source, mode, stem=entry.stem)
    modules_control, start_paused = _collection(entry_result)
    modules = [_instrumented(item, instrument(item.source, mode, stem=item.path.stem,
                                              controls_collection=modules_control, entry=False))
               for item in local[1:]]
    start_paused = start_paused or (modules_control and any(m.result.outcome is Outcome.INSTRUMENTED
                                                            for m in modules))
    entry_file = _instrumented(first, entry_result)
    return Project(entry_file, tuple(modules), tuple(notes), start_paused)


def _instrumented(item: LocalFile, result: Result) -> ProjectFile:
    """``item`` with ``result``, the rewrite of its program, and its kind knowing the copy that makes."""
    return ProjectFile(item.path, item.relative, item.module, result, item.kind.instrumented(result))


def _collection(entry: Result) -> Tuple[bool, bool]:
    """Who resumes and pauses collection, from the entry script's rewrite: (the modules' outermost regions do,
    collection starts paused as far as the entry says; a module's copy that resumes makes it so too).

    A script with ITT markers of its own decides collection itself: it starts paused when the script resumes
    it. Otherwise the entry script's own regions resume and pause when it has any (or its autoitt copy, given
    again, does), else the modules' do. With no copy to resume it, the whole run is collected, so framework
    tasks still show."""
    detection = entry.detection
    if detection.by_hand:
        return False, detection.resumes_collection
    modules_control = not any(region.outermost for region in entry.regions)
    return modules_control, (entry.outcome is Outcome.INSTRUMENTED or (
        entry.outcome is Outcome.ALREADY_INSTRUMENTED and detection.resumes_collection))
