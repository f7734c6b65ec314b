"""``autoitt profile``: rewrite a copy into a result folder, run it, read the results back.

parse -> detect -> plan -> rewrite (transforms) -> run (a backend) -> read
results (tracefile, analysis) -> report (summary). The built-in backend runs
the copy with autoitt's own ITT collector; the VTune backend runs it under
``vtune``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from transforms import Mode, Outcome, Result, SourceError

from . import files
from .results import RunInfo, new_result_dir

BACKENDS = ("auto", "builtin", "vtune")
TRACE_SUBDIR = "itt"


def find_vtune() -> Optional[Path]:
    """The ``vtune`` executable: on PATH, under $VTUNE_PROFILER_DIR, or under $ONEAPI_ROOT."""
    found = shutil.which("vtune")
    if found:
        return Path(found)
    candidates = []
    if os.environ.get("VTUNE_PROFILER_DIR"):
        candidates.append(Path(os.environ["VTUNE_PROFILER_DIR"]) / "bin64" / "vtune")
    if os.environ.get("ONEAPI_ROOT"):
        candidates.append(Path(os.environ["ONEAPI_ROOT"]) / "vtune" / "latest" / "bin64" / "vtune")
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def choose_backend(requested: str) -> Tuple[str, str]:
    """(backend, one line saying which and why)."""
    if requested == "builtin":
        return "builtin", "built-in ITT collector (--backend builtin)"
    vtune = find_vtune()
    if requested == "vtune":
        if vtune is None:
            raise SourceError("vtune", "not found on PATH, under $VTUNE_PROFILER_DIR or $ONEAPI_ROOT; "
                                       "install Intel VTune Profiler or use --backend builtin")
        return "vtune", f"VTune at {vtune} (--backend vtune)"
    if vtune is not None:
        return "vtune", f"VTune found at {vtune}"
    return "builtin", "built-in ITT collector (no vtune on PATH, $VTUNE_PROFILER_DIR or $ONEAPI_ROOT)"


@dataclass(frozen=True)
class Prepared:
    """The copy to run and what the rewrite decided."""

    result: Result
    copy: Path
    step_labels: List[str]
    start_paused: bool
    notes: List[str]
    #: JSON mapping for the launcher's import hook, when imported modules were instrumented
    modules: Optional[Path] = None
    domains: List[str] = field(default_factory=list)


def prepare(script: Path, mode: Mode, folder: Path) -> Prepared:
    """Instrument ``script`` and the local modules it imports into ``folder``.

    Beside the copy: ``instrument.diff`` (every file), ``loops.json`` (with
    each region's ``path``) and, when imported modules were instrumented,
    ``modules/`` with their copies and ``modules.json`` for the launcher's
    import hook (the user's folder is never written to).
    """
    from .diff import marker_diff
    from .project import load_project

    project = load_project(script, mode)
    result = project.entry.result
    notes = project.messages()
    loops = [{**r.to_json(), "path": item.relative} for item in project.files for r in item.result.detection.regions]
    (folder / "loops.json").write_text(json.dumps(loops, indent=2) + "\n")
    copy = folder / f"{script.stem}_itt.py"
    diffs = []
    for item in project.instrumented:
        target = copy if item is project.entry else folder / "modules" / item.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(target, item.result.output, mode_from=item.path)
        text, _ = marker_diff(item.result.source.text, item.result.output.decode(item.result.source.encoding),
                              str(item.path), str(target))
        diffs.append(text)
    if diffs:
        (folder / "instrument.diff").write_text("".join(diffs))
    copies = {str(item.path.resolve()): str((folder / "modules" / item.relative).resolve())
              for item in project.instrumented if item is not project.entry}
    if copies:
        (folder / "modules.json").write_text(json.dumps(copies, indent=2) + "\n")
    if result.outcome is Outcome.INSTRUMENTED:
        start_paused = True
    else:
        shutil.copy2(script, copy)
        # Already instrumented (its own resume/pause decide), or a module controls
        # collection; else nothing to mark: collect the whole run, so framework tasks still show.
        start_paused = result.outcome is Outcome.ALREADY_INSTRUMENTED or bool(copies)
        if not project.instrumented and result.outcome is Outcome.NOTHING_TO_DO:
            notes.append(f"{script}: no training loops found; profiling the whole run without autoitt markers")
    labels = sorted({r["label"] for r in loops if r["role"] == "step"})
    return Prepared(result, copy, labels, start_paused, notes,
                    folder / "modules.json" if copies else None,
                    sorted({mode.domain_for(Path(item.relative).stem) for item in project.instrumented}))


def launch_command(copy: Path, script: Path, args: Sequence[str]) -> List[str]:
    """The target command: the same interpreter, through the launcher that makes the copy act as ``script``."""
    return [sys.executable, "-m", "instrumenter.launch", str(copy), str(script), *args]


def run_builtin(command: List[str], trace_dir: Path, start_paused: bool,
                stdout_to_stderr: bool = False) -> Tuple[int, float]:
    """Run the target with the built-in collector; returns (exit code, elapsed seconds).

    ``stdout_to_stderr`` keeps autoitt's stdout for machine-readable output.
    """
    from .collector import environment

    env = dict(os.environ)
    env.update(environment(trace_dir, start_paused))
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=sys.stderr.fileno() if stdout_to_stderr else None)
    try:
        code = process.wait()
    except KeyboardInterrupt:
        # The target got the same SIGINT; let it finish writing what it recorded.
        code = process.wait()
    return code, time.perf_counter() - started


def profile(script: Path, args: Sequence[str], mode: Mode, result_dir: Optional[Path], backend: str,
            say, stdout_to_stderr: bool = False, vtune_options=None,
            vtune_flags_given: Sequence[str] = ()) -> Tuple[Path, RunInfo]:
    """Prepare, run and record one profile; returns the folder and the run's info.

    ``vtune_options`` (a :class:`~instrumenter.vtune_cli.VTuneOptions`) apply to the VTune backend only;
    ``vtune_flags_given`` names those the user typed, to say they are ignored by the built-in one.
    """
    if not script.is_file():
        files.read_script(script)  # raises the precise error (missing, directory, unreadable)
    folder = new_result_dir(script, result_dir)
    chosen, why = choose_backend(backend)
    say(f"backend: {why}")
    prepared = prepare(script, mode, folder)
    for note in prepared.notes:
        say(note)
    command = launch_command(prepared.copy, script, args)
    info = RunInfo(script=str(script), copy=str(prepared.copy), args=list(args), backend=chosen, command=command,
                   domain=mode.domain_for(script.stem), step_labels=prepared.step_labels,
                   start_paused=prepared.start_paused, notes=prepared.notes, domains=prepared.domains)
    if prepared.modules is not None:
        from .launch import MODULES_VARIABLE

        # Inherited by the target (through VTune too); the launcher pops it.
        os.environ[MODULES_VARIABLE] = str(prepared.modules)
    info.save(folder)
    if chosen == "vtune":
        from . import vtune_backend
        from .vtune_cli import VTuneConfig, VTuneOptions

        config = VTuneConfig(vtune=str(find_vtune()), target=tuple(command), copy=prepared.copy, script=script,
                             results=folder, start_paused=prepared.start_paused,
                             options=vtune_options or VTuneOptions())
        started = time.perf_counter()
        runs = vtune_backend.run(config, folder, say, stdout_to_stderr)
        info.elapsed_s = time.perf_counter() - started
        info.exit_code = vtune_backend.script_exit_code(runs)
        info.save(folder)
        return folder, info
    if vtune_flags_given:
        say(f"{', '.join(vtune_flags_given)}: VTune backend options, ignored with the built-in collector")
    say(f"running {script} ({prepared.copy.name}) with the built-in collector; results in {folder}/")
    info.exit_code, info.elapsed_s = run_builtin(command, folder / TRACE_SUBDIR, prepared.start_paused,
                                                 stdout_to_stderr)
    info.save(folder)
    return folder, info


def analyse(folder: Path, info: RunInfo):
    """Read the recorded files and write trace.json, summary.json and steps.svg; returns the Summary.

    For the VTune backend: read its saved reports and write summary.json.
    """
    if info.backend == "vtune":
        from . import vtune_backend

        return vtune_backend.analyse(folder, info)
    from . import chrome_trace
    from .analysis import intervals, summarize
    from .plot import step_time_svg
    from .tracefile import read_trace_dir

    trace_dir = folder / TRACE_SUBDIR
    traces = read_trace_dir(trace_dir) if trace_dir.is_dir() else []
    summary = summarize(traces, info.elapsed_s, info.step_labels, info.domains or [info.domain], info.start_paused)
    if not traces:
        summary.warnings.append("the collector wrote no trace file: no process of the run loaded it "
                                "(was ittapi imported? did the script start?)")
    items, _ = intervals(traces)
    script_name = Path(info.script).name
    (folder / "trace.json").write_text(json.dumps(chrome_trace.build(traces, items, script_name)))
    (folder / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    (folder / "steps.svg").write_text(step_time_svg(summary.steps, f"Step time, {script_name}"))
    return summary
