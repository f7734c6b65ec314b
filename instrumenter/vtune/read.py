"""Reading a VTune run back: ``vtune.json`` and the saved CSV reports -> the summary, on the user's own lines.

Needs no VTune: ``autoitt report`` works from the saved files. Rows VTune
reports on a copy (``train_itt.py``, its line) are shown as the original
(``train.py``, its line) through the copy's line map in
``instrumentation.json``. (The launcher names Python code by its original
already; the map catches whatever still names the copy.)
"""

from __future__ import annotations

import ast
import dataclasses
import json
import shlex
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..profile.instrumentation import Instrumentation, digest
from ..profile.read_context import ReadContext
from ..profile.results import autoitt_fault, save_outputs, unwritten_warnings
from .collect import CSV_DIR, load, rank_of
from .commands import REPORTS
from .csv_reports import FunctionRow, read_result
from .summary import VTuneAnalysis, VTuneSummary


def analyse(folder: Path, context: ReadContext) -> VTuneSummary:
    """The summary of a VTune run from vtune.json and the saved CSVs; writes summary.json."""
    record, instrumentation = context.record, context.instrumentation
    vtune, runs = load(folder)
    warnings: List[str] = []
    to_original = source_mapper(instrumentation, warnings)
    analyses = []
    for run in runs:
        results = []
        for name in run.result_dirs:
            csv_files = {kind: folder / CSV_DIR / f"{name}-{kind}.csv" for kind, _, _ in REPORTS[run.analysis]}
            report = read_result(name, rank_of(name, run.analysis),
                                 {kind: path for kind, path in csv_files.items() if path.is_file()})
            report.functions = [to_original(row) for row in report.functions]
            results.append(report)
        analyses.append(VTuneAnalysis(run, results))
        warnings += run.warnings
        if run.status == "ok" and run.script_exit_code is None:
            warnings.append(f"{run.analysis}: the script's exit code was not recorded (killed by a signal, "
                            "os._exit, or a rank on another host)")
    fault = autoitt_fault(folder)
    if fault:
        warnings.append(fault)
    first = next((r for a in analyses for r in a.results if r.elapsed_s is not None), None)
    # VTune's own figure; else the run's, if its end was recorded (a run whose autoitt was killed has none: unknown,
    # never 0)
    ended = [run.elapsed_s for run in runs if run.elapsed_s] + ([record.elapsed_s] if record.elapsed_s else [])
    elapsed = first.elapsed_s if first is not None else (ended[0] if ended else None)
    collected = elapsed - first.paused_s if first is not None and first.paused_s is not None else 0.0
    summary = VTuneSummary(elapsed_s=elapsed, collected_s=max(collected, 0.0), warnings=warnings, vtune=vtune,
                           analyses=analyses, gui=[f"vtune-gui {shlex.quote(str(folder / name))}"
                                                   for a in analyses for name in a.run.result_dirs],
                           csv_dir=str(folder / CSV_DIR))
    unwritten = save_outputs(folder, {"summary.json": json.dumps(summary.to_json(), indent=2) + "\n"})
    return dataclasses.replace(summary, warnings=[*warnings, *unwritten_warnings(folder, unwritten)],
                               unwritten=unwritten)


def source_mapper(instrumentation: Instrumentation, warnings: List[str]) -> Callable[[FunctionRow], FunctionRow]:
    """A function that shows a row on a copy (``train_itt.py``, its line) as its original (``train.py``, its
    line), and names every file of the profiled project as the user named the script (``tiny.py``)."""
    for record in instrumentation.files:
        if record.runs is not None and not _unchanged(Path(record.path), record.sha256):
            warnings.append(f"{instrumentation.shown_path(record)} changed since it was profiled: its line numbers "
                            "below are those of the version that ran")
    definitions: Dict[str, Dict[str, int]] = {}

    def defined_at(path: str, function: str) -> Optional[int]:
        if path not in definitions:
            definitions[path] = _definitions(Path(path))
        return definitions[path].get(function.rsplit(".", 1)[-1])

    def to_original(row: FunctionRow) -> FunctionRow:
        if not row.source_file:
            return row
        record = instrumentation.file_running(row.source_file)
        if record is not None:
            copy_line = row.source_line or defined_at(record.runs, row.function)
            return dataclasses.replace(row, source_file=instrumentation.shown_path(record),
                                       source_line=record.line_map.original_line(copy_line) if copy_line else None)
        record = instrumentation.file_at(row.source_file)
        if record is None:
            return row
        line = row.source_line or defined_at(record.program or record.path, row.function)
        place = record.place(line) if line else None  # a notebook's program line: its cell's
        cell, line = (place.cell, place.line) if place else (None, line)
        return dataclasses.replace(row, source_file=instrumentation.shown_path(record) + (f" cell {cell}" if cell else ""),
                                   source_line=line)

    return to_original


def _unchanged(path: Path, sha256: str) -> bool:
    try:
        return digest(path.read_bytes()) == sha256
    except OSError:
        return False


def _definitions(path: Path) -> Dict[str, int]:
    """Function name -> the line of its ``def`` in ``path``, for names defined once (VTune names Python
    functions; where a report has no ``Source Line``, the definition is the line to show)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    seen: Dict[str, List[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            seen.setdefault(node.name, []).append(node.lineno)
    return {name: lines[0] for name, lines in seen.items() if len(lines) == 1}
