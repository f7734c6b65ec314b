"""``instrumentation.json``: what the rewrite decided for a profiled run, saved once, read by every later stage.

``autoitt profile`` instruments the script and its local modules into the
result folder, then writes this file. The launcher reads it to run each copy
in place of its original and to show the original's file and lines in
tracebacks; the built-in backend reads the domains and step labels from it;
the VTune backend maps the lines VTune reports on a copy back to the
original. Nothing re-derives these facts from the copies.

Format (version 1), a JSON object::

    {"format": 1,
     "script": "train.py",                 # the script as the user named it
     "start_paused": true,                 # collection starts paused (the copy resumes it)
     "files": [                            # the script first, then the local modules it imports
       {"path": "/abs/train.py",           # the original
        "relative": "train.py",            # relative to the script's folder
        "module": null,                    # the module name it is imported as (null for the script)
        "runs": "/abs/results/train_itt.py",  # what runs in its place; null: the original itself
        "outcome": "instrumented",         # or "nothing to instrument", "already instrumented"
        "domain": "autoitt.train",         # the ITT domain of the markers autoitt adds
        "own_domains": [],                 # domains its own ITT calls create (an autoitt copy's, a
                                           # hand-instrumented script's), where written out
        "step_labels": ["step"],           # task names of its step iterations
        "runtime": ["instrumenter.runtime.collection"],  # autoitt's modules its copy imports (instrumenter.runtime.window
                                           # with --skip-steps/--steps)
        "sha256": "...",                   # of the original's bytes, to tell a script edited since
        "regions": [{"line": 101, ...}],   # as ``autoitt loops --json`` prints them
        "tasks": [{"role": "step", "label": "step", "around": "step_loop", "each": "step"}, ...],
                                           # per region of an instrumented file, the task names its
                                           # markers record (transforms.RegionTasks); readers use these
        "line_map": {"copy_lines": 160, "original_lines": 127, "inserted": [[15, 16], ...]},
        "program": null,                   # a notebook: its code cells as one Python file, whose lines
                                           # line_map maps to (and tracebacks show)
        "cells": null,                     # a notebook: [[first program line, cell index, cell id], ...]
        "frameworks": ["torch"],           # what it imports of torch, tensorflow (keras counts as tensorflow)
        "operators_in": ["eval", "step"],  # --torch-ops sampled: the iteration tasks whose sampled
                                           # iterations record PyTorch's operators (else [])
        "one_task": [[6, "trainer.run() stays one task: ..."]]}]}  # [line, why] of each library call the
                                           # copy gives no callback (a record from before: none listed)

``line_map`` maps lines of ``runs`` to lines of ``path`` (of ``program``, for a notebook); see
:class:`transforms.LineMap` (every line not listed in ``inserted`` is the next
line of the original).

The launcher reads this file with the standard library alone (it runs inside
the user's process): keep the format plain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from transforms import LineMap, Outcome, RegionTasks

from ..sources.files import atomic_write
from ..sources.kind import Place
from .results import read_record

FILE = "instrumentation.json"
FORMAT = 1


@dataclass(frozen=True)
class FileRecord:
    """One file of the profiled project; see the module docstring for each field."""

    path: str
    relative: str
    module: Optional[str]
    runs: Optional[str]
    outcome: str
    domain: str
    own_domains: Tuple[str, ...]
    step_labels: Tuple[str, ...]
    runtime: Tuple[str, ...]
    sha256: str
    regions: Tuple[dict, ...]
    line_map: LineMap
    program: Optional[str] = None
    cells: Optional[Tuple[Tuple[int, int, Optional[str]], ...]] = None
    frameworks: Tuple[str, ...] = ()
    tasks: Tuple[RegionTasks, ...] = ()
    operators_in: Tuple[str, ...] = ()
    #: (line, why) of each library call whose copy gives the library no callback: it runs as one task
    one_task: Tuple[Tuple[int, str], ...] = ()

    @property
    def instrumented(self) -> bool:
        return self.outcome == Outcome.INSTRUMENTED.value

    def to_json(self) -> dict:
        return {"path": self.path, "relative": self.relative, "module": self.module, "runs": self.runs,
                "outcome": self.outcome, "domain": self.domain, "own_domains": list(self.own_domains),
                "step_labels": list(self.step_labels),
                "runtime": list(self.runtime), "sha256": self.sha256, "regions": list(self.regions),
                "line_map": self.line_map.to_json(), "program": self.program,
                "cells": [list(cell) for cell in self.cells] if self.cells is not None else None,
                "frameworks": list(self.frameworks), "tasks": [task.to_json() for task in self.tasks],
                "operators_in": list(self.operators_in), "one_task": [list(call) for call in self.one_task]}

    @classmethod
    def from_json(cls, data: dict) -> "FileRecord":
        return cls(path=data["path"], relative=data["relative"], module=data["module"], runs=data["runs"],
                   outcome=data["outcome"], domain=data["domain"], own_domains=tuple(data["own_domains"]),
                   step_labels=tuple(data["step_labels"]),
                   runtime=tuple(data["runtime"]), sha256=data["sha256"], regions=tuple(data["regions"]),
                   line_map=LineMap.from_json(data["line_map"]), program=data.get("program"),
                   cells=tuple(tuple(cell) for cell in data["cells"]) if data.get("cells") is not None else None,
                   frameworks=tuple(data.get("frameworks", ())), tasks=_tasks(data),
                   operators_in=tuple(data.get("operators_in", ())),
                   one_task=tuple((int(line), str(why)) for line, why in data.get("one_task", ())))

    def place(self, line: int) -> Place:
        """Where a line of ``path`` (of ``program``, for a notebook) is in the file: its cell and line in it, as
        :meth:`instrumenter.sources.kind.FileKind.place` said when the file was read (a line before the first
        code cell counts as that cell's)."""
        if not self.cells:
            return Place(line)
        start, index, cell_id = max((cell for cell in self.cells if cell[0] <= line), default=self.cells[0])
        return Place(line - start + 1, index, cell_id)


def _tasks(data: dict) -> Tuple[RegionTasks, ...]:
    """A file record's region task names. A record written before they were saved (no ``tasks``) does not
    say which regions were calls: each is named as a loop's, whose ``each`` is a call's one task."""
    if "tasks" in data:
        return tuple(RegionTasks(**task) for task in data["tasks"])
    if data["outcome"] != Outcome.INSTRUMENTED.value:
        return ()
    return tuple(RegionTasks.named(region["role"], region["label"], "for") for region in data["regions"])


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Instrumentation:
    """The record of one profiled run's instrumentation: the script first, then its local modules."""

    script: str
    start_paused: bool
    files: Tuple[FileRecord, ...]

    @property
    def entry(self) -> FileRecord:
        return self.files[0]

    @property
    def domain(self) -> str:
        """The entry script's domain, shown first in summaries: autoitt's, or the script's own."""
        entry = self.entry
        return entry.own_domains[0] if not entry.instrumented and entry.own_domains else entry.domain

    @property
    def domains(self) -> List[str]:
        """Every domain the run's markers record on: autoitt's and the scripts' own."""
        return sorted({f.domain for f in self.files if f.instrumented}
                      | {d for f in self.files for d in f.own_domains}) or [self.domain]

    @property
    def step_labels(self) -> List[str]:
        return sorted({label for f in self.files for label in f.step_labels})

    @property
    def operators_in(self) -> List[str]:
        """The iteration tasks whose sampled iterations recorded PyTorch's operators (``--torch-ops
        sampled``), every file's; empty where every operator was recorded, or none."""
        return sorted({name for f in self.files for name in f.operators_in})

    @property
    def tasks(self) -> List[RegionTasks]:
        """The task names of every region autoitt's markers record, file after file."""
        return [task for f in self.files for task in f.tasks]

    @property
    def regions(self) -> List[dict]:
        """Every region, with the ``path`` of its file: the content of ``loops.json``."""
        return [{**region, "path": f.relative} for f in self.files for region in f.regions]

    def file_running(self, path: str) -> Optional[FileRecord]:
        """The record of the file whose copy is ``path``, if ``path`` names a copy.

        A profiler may name a file by its base name alone; only the script's
        copy (``<stem>_itt.py``) can be told by that: a module's copy has its
        original's name.
        """
        given = Path(path)
        for record in self.files:
            if record.runs is None:
                continue
            runs = Path(record.runs)
            if given == runs or (record is self.entry and given.name == runs.name != Path(record.path).name):
                return record
        return None

    def file_at(self, path: str) -> Optional[FileRecord]:
        """The record of the original file at ``path`` (or a notebook's program), if it is one of the project's."""
        try:
            resolved = str(Path(path).resolve())
        except OSError:
            return None
        # A notebook's code runs under the name of its program (see the launcher).
        return next((record for record in self.files if resolved in (record.path, record.program)), None)

    def shown_path(self, record: FileRecord) -> str:
        """A file of the project as the user would name it: the script as typed, modules beside it."""
        return self.script if record is self.entry else str(Path(self.script).parent / record.relative)

    def to_json(self) -> dict:
        return {"format": FORMAT, "script": self.script, "start_paused": self.start_paused,
                "files": [f.to_json() for f in self.files]}

    def save(self, folder: Path) -> Path:
        path = folder / FILE
        atomic_write(path, (json.dumps(self.to_json(), indent=2) + "\n").encode())
        return path

    @classmethod
    def load(cls, folder: Path) -> "Instrumentation":
        return read_record(folder, FILE, cls.from_json)

    @classmethod
    def from_json(cls, data: dict) -> "Instrumentation":
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this autoitt reads {FORMAT}")
        return cls(script=data["script"], start_paused=bool(data["start_paused"]),
                   files=tuple(FileRecord.from_json(f) for f in data["files"]))
