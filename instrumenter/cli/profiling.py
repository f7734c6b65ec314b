"""``autoitt profile`` and ``autoitt report``: the profiling pipeline from a script to its summary.

instrument (:mod:`instrumenter.sources.project`, into the result folder) -> record
what the rewrite decided (``instrumentation.json``) -> run the copy as the
script (:mod:`instrumenter.launch`: ``python <stem>.autoitt.pyc ARGS``) under one backend -> record how the run went (``run.json``) ->
the backend reads its results, given the :class:`~instrumenter.profile.read_context.ReadContext` built once from
the two records, into its :class:`~instrumenter.profile.summary.Summary` -> the backend renders it. ``report``
starts again from the two records.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from transforms import Outcome, SourceError

from .. import launch
from ..sources import files
from ..profile.backend import Backend, Job, Say
from ..builtin import BuiltinBackend
from ..sources.files import Output, OutputError
from ..profile.instrumentation import FILE as INSTRUMENTATION_FILE
from ..profile.instrumentation import FileRecord, Instrumentation, digest
from ..launch.launchers import find_launcher, vtune_launcher_problem
from ..profile.options import ProfileOptions
from ..sources.project import Project, ProjectFile, load_project
from ..profile.read_context import ReadContext
from ..profile.results import RUN_FILE, RunRecord, Unwritten, new_result_dir
from ..vtune import VTuneBackend, find_vtune

if TYPE_CHECKING:
    from ..profile.step_window import StepWindow

#: The backends by the name ``run.json`` records.
BACKENDS: Dict[str, type] = {backend.name: backend for backend in (BuiltinBackend, VTuneBackend)}


def choose_backend(requested: str) -> Tuple[Backend, str]:
    """The backend for ``--backend auto|builtin|vtune``, and one line saying which and why."""
    if requested == BuiltinBackend.name:
        return BuiltinBackend(), "built-in ITT collector (--backend builtin)"
    vtune = find_vtune()
    if requested == VTuneBackend.name:
        if vtune is None:
            raise SourceError("vtune", "not found on PATH, under $VTUNE_PROFILER_DIR or $ONEAPI_ROOT; "
                                       "install Intel VTune Profiler or use --backend builtin")
        return VTuneBackend(vtune), f"VTune at {vtune} (--backend vtune)"
    if vtune is not None:
        return VTuneBackend(vtune), f"VTune found at {vtune}"
    return BuiltinBackend(), "built-in ITT collector (no vtune on PATH, $VTUNE_PROFILER_DIR or $ONEAPI_ROOT)"


@dataclass(frozen=True)
class Profile:
    """One profiled run, as the result folder records it: what to read and how to show it."""

    folder: Path
    record: RunRecord
    instrumentation: Instrumentation
    backend: Backend
    #: what reading the results needs of the two records (built once, from them)
    context: ReadContext
    #: the records of the run that could not be written (run.json's end: a disk that filled during the run)
    unwritten: Tuple[Unwritten, ...] = ()

    def summarize(self, recompute: bool = True):
        """The run's summary: read from what was collected, or with ``recompute`` off, the one saved
        by an earlier read when it is still current."""
        saved = None if recompute else self.backend.saved(self.folder)
        return saved if saved is not None else self.backend.read(self.folder, self.context)


def profile(script: Path, args: Sequence[str], options: ProfileOptions, say: Say) -> Profile:
    """Instrument, run and record one profile into a new result folder.

    The script (and its local modules) is read and instrumented before the
    result folder is made: bad input leaves nothing behind.
    """
    if not script.is_file():
        files.read_script(script)  # raises the precise error (missing, directory, unreadable)
    missing = launch.missing_run_time_file()
    if missing is not None:  # before anything is made: no run could profile
        raise SourceError(str(missing), launch.INCOMPLETE_INSTALL)
    backend, why = choose_backend(options.backend)
    if options.launcher:
        # run the program found, which may be beside autoitt's interpreter and not on PATH
        found = find_launcher(options.launcher[0])
        if found is None:
            raise SourceError(options.launcher[0], "--launcher: not found on PATH or beside "
                                                   f"{sys.executable or 'the Python running autoitt'}")
        options = dataclasses.replace(options, launcher=(found, *options.launcher[1:]))
    problem = vtune_launcher_problem(options.launcher) if backend.name == VTuneBackend.name else None
    if problem:
        raise SourceError(options.launcher[0], f"--launcher: {problem}")
    if not options.torch_ops_given and backend.name == VTuneBackend.name and options.mode.torch_ops == "sampled":
        # VTune's reports count what was recorded, and cannot be scaled from a sample of the steps
        options = dataclasses.replace(options, mode=dataclasses.replace(options.mode, torch_ops="all"))
    # The copies run under autoitt's launcher, which provides the runtime they import (see Mode.launched).
    project = load_project(script, dataclasses.replace(options.mode, launched=True))
    existed = options.result_dir is not None and options.result_dir.is_dir()
    folder = new_result_dir(script, options.result_dir)
    say(f"backend: {why}")
    copy = copy_path(script, folder)
    try:
        instrumentation, notes = prepare(project, folder)
        # python <folder>/<stem>.autoitt.pyc ARGS: the main process writes the copy's code there (see launch)
        launch.write_placeholder(folder / INSTRUMENTATION_FILE, script)
        command = launch.command(script, args, folder / INSTRUMENTATION_FILE)
        record = RunRecord(script=str(script), copy=str(copy), args=list(args), backend=backend.name,
                           command=command, notes=notes, trace_steps=options.builtin.trace_steps.text,
                           first_step=options.mode.skip_steps + 1,
                           operator_sampling=sampling.to_json() if (sampling := options.operator_sampling) else None)
        record.save(folder)  # before the run, so a run that never ends can still be reported
    except (OSError, OutputError) as exc:
        # A full disk (or quota) before the run: nothing half written stays behind the error.
        _clear(folder, keep=existed)
        reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
        raise OutputError(folder, f"cannot write the result folder ({reason}); the script was not run, and "
                                  "nothing was kept there") from None
    for note in notes:
        say(note)
    if options.vtune.given and backend.name != VTuneBackend.name:  # no backend reads another's options
        say(f"{', '.join(options.vtune.given)}: VTune backend options, ignored with the built-in collector")
    finished = backend.run(Job(script, copy, command, folder, instrumentation, options), say)
    record = record.ended(finished.exit_code, finished.elapsed_s, finished.started_at, finished.machine,
                          finished.sample_mechanism)
    unwritten: Tuple[Unwritten, ...] = ()
    try:
        record.save(folder)
    except OSError as exc:
        # A full disk (or quota) after the run: what the run recorded is still worth summarizing.
        say(f"warning: could not record how the run ended in {folder / RUN_FILE}: {exc.strerror}; "
            "`autoitt report` will not know its exit code or elapsed time")
        unwritten = (Unwritten(RUN_FILE, exc.strerror or str(exc), exc.errno),)
    context = ReadContext.of(instrumentation, record, options.builtin.trace_steps)
    return Profile(folder, record, instrumentation, backend, context, unwritten)


def _clear(folder: Path, keep: bool) -> None:
    """Take back what a profile wrote into its result folder: the folder itself, or with ``keep`` (the user's
    empty folder, given with -r) what is in it."""
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for item in folder.iterdir():
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)


def load(folder: Path, trace_steps: Optional[StepWindow] = None) -> Profile:
    """An earlier run, from its result folder (``autoitt report``); ``trace_steps``: another window than the
    one recorded (``report --trace-steps``)."""
    record = RunRecord.load(folder)
    backend = BACKENDS.get(record.backend)
    if backend is None:
        raise SourceError(str(folder), f"recorded with an unknown backend {record.backend!r}")
    if not (folder / INSTRUMENTATION_FILE).is_file():
        raise SourceError(str(folder), f"made by an earlier autoitt (no {INSTRUMENTATION_FILE}): "
                                       f"run `autoitt profile {record.script}` again")
    if trace_steps is not None:
        record = dataclasses.replace(record, trace_steps=trace_steps.text)
    instrumentation = Instrumentation.load(folder)
    return Profile(folder, record, instrumentation, backend(), ReadContext.of(instrumentation, record, trace_steps))


def copy_path(script: Path, folder: Path) -> Path:
    """Where the script's copy runs from: ``<stem>_itt.py`` in the result folder."""
    return folder / f"{script.stem}_itt.py"


def prepare(project: Project, folder: Path) -> Tuple[Instrumentation, List[str]]:
    """Write an instrumented project into ``folder``; (the record, notes).

    Beside the script's copy: ``modules/`` with the copies of local modules
    (the user's folder is never written to), ``instrument.diff`` (every file),
    ``loops.json`` and ``instrumentation.json``. What runs is what the entry's
    kind makes runnable (:meth:`~instrumenter.sources.kind.FileKind.runnable`: for
    a notebook its program, with a prelude), beside, for a notebook, the
    program itself (``<stem>_cells.py``, what tracebacks show) and the
    instrumented notebook.
    """
    from .diff import marker_diff

    script = project.entry.path
    notes = project.messages()
    entry = project.entry.result
    kind = project.entry.kind
    copy = copy_path(script, folder)
    targets = {id(item): copy if item is project.entry else folder / "modules" / item.relative
               for item in project.instrumented}
    # Already instrumented (its own resume/pause decide), or nothing to mark: the script runs as it is.
    entry_runs, entry_map = kind.runnable(entry.output if entry.outcome is Outcome.INSTRUMENTED
                                          else entry.source.data, entry.line_map)
    outputs = [Output(targets[id(item)], entry_runs if item is project.entry else item.result.output, item.path)
               for item in project.instrumented]
    if entry.outcome is not Outcome.INSTRUMENTED:
        outputs.append(Output(copy, entry_runs, script))
    # Files only a notebook has beside what runs: its program (a script is its own, the original tracebacks
    # show) and its instrumented copy (a script's is what runs).
    if kind.program is not None:
        outputs.append(Output(program_path(script, folder), kind.program, script))
        if entry.outcome is Outcome.INSTRUMENTED:
            outputs.append(Output(copy.with_suffix(kind.copy_suffix), project.entry.copy_bytes(), script))
    files.write_outputs(outputs, files.COPIES)
    diffs = [_diff(item, targets[id(item)], marker_diff) for item in project.instrumented]
    if diffs:
        # File names keep their own bytes, even undecodable ones.
        files.atomic_write(folder / "instrument.diff", "".join(diffs).encode("utf-8", "surrogateescape"))
    if not project.instrumented and entry.outcome is Outcome.NOTHING_TO_DO:
        notes.append(f"{script}: no training loops found; profiling the whole run without autoitt markers")
    if entry.detection.by_hand:
        notes.append(f"{script} is instrumented by {entry.detection.already_instrumented}: its own markers are "
                     "collected" + ("" if entry.detection.resumes_collection else
                                    ", from the start (it never calls itt.resume())")
                     + ("" if entry.outcome is Outcome.INSTRUMENTED else "; autoitt adds no markers"))
    records = [_record(item, targets.get(id(item)) or (copy if item is project.entry else None))
               for item in project.files]
    records[0] = dataclasses.replace(records[0], line_map=entry_map, cells=kind.cell_starts(),
                                     program=str(program_path(script, folder).resolve())
                                     if kind.program is not None else None)
    instrumentation = Instrumentation(str(script), project.start_paused, tuple(records))
    files.atomic_write(folder / "loops.json", (json.dumps(instrumentation.regions, indent=2) + "\n").encode())
    instrumentation.save(folder)
    return instrumentation, notes


def program_path(script: Path, folder: Path) -> Path:
    """A notebook's program (its code cells, translated) in the result folder: ``<stem>_cells.py``."""
    return folder / f"{script.stem}_cells.py"


def _diff(item: ProjectFile, target: Path, marker_diff) -> str:
    """``item``'s diff in ``instrument.diff``, to its copy as written beside ``target`` (what runs): for a
    notebook, the instrumented notebook."""
    return item.diff(str(item.path), str(target.with_suffix(item.kind.copy_suffix)), marker_diff)


def _record(item: ProjectFile, runs) -> FileRecord:
    result = item.result
    return FileRecord(path=str(item.path.resolve()), relative=item.relative, module=item.module,
                      runs=str(runs.resolve()) if runs is not None else None, outcome=result.outcome.value,
                      domain=result.domain, own_domains=result.detection.own_domains,
                      step_labels=result.step_labels,
                      runtime=result.plan.runtime if result.outcome is Outcome.INSTRUMENTED else (),
                      tasks=result.plan.tasks if result.outcome is Outcome.INSTRUMENTED else (),
                      operators_in=result.plan.operators_in if result.outcome is Outcome.INSTRUMENTED else (),
                      sha256=digest(item.kind.data), regions=tuple(item.kind.region_json(r) for r in result.regions),
                      line_map=result.line_map,
                      frameworks=tuple(name for name, used in (("torch", result.detection.uses_torch),
                                                               ("tensorflow", result.detection.uses_tensorflow))
                                       if used),
                      one_task=_one_task_calls(result) if result.outcome is Outcome.INSTRUMENTED else ())


def _one_task_calls(result) -> Tuple[Tuple[int, str], ...]:
    """(line, why) of the library calls the copy gives no callback: detection's note at the call's line."""
    said = {note.line: note.message for note in result.plan.notes if note.line is not None}
    return tuple((region.line, said.get(region.line, "autoitt has no callbacks for it"))
                 for region in result.regions if region.kind == "call" and region.library is None)
