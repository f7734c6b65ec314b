"""The ``autoitt`` command line: thin commands over transforms, files, diff and report.

Heavy imports (libcst, rich) happen inside the commands that need them, so
``autoitt --help`` starts quickly.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence, Tuple

import click

from . import __version__
from .report import Report

_EPILOG = """\b
Examples:
  autoitt loops train.py              what would be marked, and why
  autoitt instrument train.py --diff  preview the markers, write nothing
  autoitt instrument train.py         write train_itt.py next to train.py
  vtune -collect hotspots -start-paused -- python train_itt.py
"""


def _parse_labels(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> Tuple[Tuple[int, str], ...]:
    labels = []
    for value in values:
        line, sep, name = value.partition("=")
        if not sep or not line.strip().isdigit() or not name.strip():
            raise click.BadParameter(f"expected LINE=NAME (e.g. 42=warmup), got {value!r}")
        name = name.strip()
        if any(ch in name for ch in "\"\\\n"):
            raise click.BadParameter(f"a label cannot contain quotes, backslashes or newlines: {name!r}")
        labels.append((int(line), name))
    return tuple(labels)


_label_option = click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="LINE=NAME",
    callback=_parse_labels,
    help="Name the task of the loop (or call) on LINE of the original script; repeatable.",
)


def _mode_options(command):
    """The options that decide what is inserted, shared by instrument and profile."""
    for option in reversed([
        click.option("--domain", metavar="NAME", help="ITT domain for the markers. Default: autoitt.<script stem>."),
        click.option("--no-torch-ops", is_flag=True,
                     help="Do not wrap PyTorch training in torch.autograd.profiler.emit_itt() (no per-operator tasks)."),
        click.option("--skip-steps", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
                     help="Start collecting at step N+1 (steps counted across epochs), leaving warm-up out."),
        click.option("--steps", type=click.IntRange(min=1), default=None, metavar="M",
                     help="Collect M steps, then pause. Default: to the end of training."),
        click.option("--pt-regions", is_flag=True,
                     help="Also mark each step loop for VTune anomaly detection (itt.pt_region_*; at most 8)."),
        _label_option,
    ]):
        command = option(command)
    return command


def _mode(domain, no_torch_ops, skip_steps, steps, pt_regions, labels):
    from transforms import Mode

    return Mode(domain=domain, torch_ops=not no_torch_ops, skip_steps=skip_steps, steps=steps,
                pt_regions=pt_regions, labels=labels)


@click.group(epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autoitt")
def cli() -> None:
    """Profile ML training with Intel VTune, without editing your script.

    autoitt finds the training loops of an unmodified script (epochs, steps,
    evaluation; PyTorch, TensorFlow 1 sessions, TF2/Keras, library fit()
    calls) and writes an instrumented copy with Intel ITT markers:
    itt.resume()/itt.pause() around training (for VTune's -start-paused),
    one ITT task per loop and per iteration, and for PyTorch emit_itt() so
    every operator is labelled. Your script is never modified.
    """


@cli.command(epilog=_EPILOG)
@click.argument("script", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(),
              help="Where to write the copy. Default: <stem>_itt.py next to SCRIPT. A folder (existing, or "
                   "ending in /) receives every instrumented file: SCRIPT and the local modules it imports.")
@click.option("--in-place", is_flag=True,
              help="Rewrite SCRIPT itself (a backup is kept as SCRIPT.orig).")
@click.option("--force", is_flag=True,
              help="Replace an output file (or backup) that autoitt did not write.")
@click.option("--diff", "show_diff", is_flag=True, help="Print what would be inserted; write nothing.")
@click.option("--diff-style", type=click.Choice(["markers", "unified"]), default="markers", show_default=True,
              help="markers: indentation changes shown as context, so inserted lines stand out; "
                   "unified: a strict diff that patch can apply.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if markers would be added, 0 if the script is already "
                   "instrumented or has nothing to instrument.")
@_mode_options
@click.option("--color/--no-color", default=None, help="Colour the diff. Default: when printing to a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
def instrument(script: Path, output: Optional[str], in_place: bool, force: bool, show_diff: bool,
               diff_style: str, check: bool, domain: Optional[str], no_torch_ops: bool, skip_steps: int,
               steps: Optional[int], pt_regions: bool, labels: Tuple[Tuple[int, str], ...],
               color: Optional[bool], quiet: bool) -> None:
    """Write a copy of SCRIPT with ITT markers around its training loops.

    The copy imports ittapi.compat (pip install ittapi), creates one ITT
    domain, resumes collection right before training starts and pauses it
    right after, and marks every epoch, step and eval loop and every
    model.fit()-style call with ITT tasks that stay balanced on break,
    continue, return and exceptions. Run the copy under
    `vtune -collect hotspots -start-paused`, or with `autoitt profile`.

    Loops are found by what they do (loss.backward(), optimizer.step(),
    sess.run(train_op), apply_gradients, train_on_batch, ...). Override with a
    comment on the loop's line: `# autoitt: skip`, or `# autoitt: step`,
    `epoch`, `eval`. See what was found with `autoitt loops SCRIPT`.

    Exit codes: 0 done (or nothing to do), 1 --check found changes,
    2 bad usage or input, 123 internal error.
    """
    if in_place and output is not None:
        raise click.UsageError("--in-place and --output exclude each other")
    mode = _mode(domain, no_torch_ops, skip_steps, steps, pt_regions, labels)
    report = Report(check=check, quiet=quiet)
    _run_guarded(report, lambda: _instrument_one(
        report, script, mode, output=output, in_place=in_place, force=force, show_diff=show_diff,
        diff_style=diff_style, color=color, write=not (show_diff or check)))
    sys.exit(int(report.exit_code))


def _run_guarded(report: Report, action) -> None:
    """Turn any unexpected exception into exit code 123 with a useful message."""
    from transforms import RewriteError, SourceError

    try:
        action()
    except SourceError as exc:
        report.input_error(str(exc))
    except RewriteError as exc:
        report.internal_error(str(exc))
    except (KeyboardInterrupt, click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # noqa: BLE001 - the contract is exit 123, never a bare traceback
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
        report.internal_error(f"{type(exc).__name__}: {exc}\n{detail.rstrip()}")


def _instrument_one(report: Report, script: Path, mode, *, output: Optional[str], in_place: bool, force: bool,
                    show_diff: bool, diff_style: str, color: Optional[bool], write: bool) -> None:
    from transforms import Outcome, SourceError

    from . import files
    from .project import load_project

    project = load_project(script, mode)
    result = project.entry.result
    modules = [item for item in project.modules if item.result.outcome is Outcome.INSTRUMENTED]
    for message in project.messages():
        report.note(message)
    if result.outcome is Outcome.ALREADY_INSTRUMENTED:
        report.unchanged_file(f"{script}: already instrumented by {result.detection.already_instrumented}; nothing to do")
        return
    if result.outcome is Outcome.NOTHING_TO_DO and not modules:
        report.unchanged_file(f"{script}: no training loops found; nothing written "
                              "(see `autoitt loops` and the '# autoitt: step' comment)")
        return

    # -o is kept as typed: a trailing slash asks for a folder even before it exists.
    directory = output is not None and (output.endswith(("/", os.sep)) or Path(output).is_dir())
    output = Path(output) if output is not None else None
    written = project.instrumented

    def target_of(item) -> Path:
        if directory:
            return output / (script.name if item is project.entry else item.relative)
        return script if in_place else (output or files.default_output(script))

    def regions_of(item) -> str:
        return ", ".join(f"{r.role} at line {r.line}" for r in item.result.detection.regions)

    if show_diff:
        for item in written:
            _print_diff(item.result, item.path, target_of(item) if item is project.entry or directory
                        else Path(item.relative + " (instrumented)"), diff_style, color)
    summary = "; ".join(f"{item.relative}: {regions_of(item)}" for item in written) if modules else regions_of(
        project.entry)
    if not write:
        report.changed_file(f"would instrument {script}: {summary}")
        return
    if directory:
        for item in written:
            target = target_of(item)
            if files.same_file(target, item.path):
                raise SourceError(str(target), "is the original file; choose another -o folder")
            if target.exists() and not force and not files.written_by_autoitt(target):
                raise SourceError(str(target), "exists and was not written by autoitt; choose another -o or pass --force")
        for item in written:
            target = target_of(item)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                files.atomic_write(target, item.result.output, mode_from=item.path)
            except OSError as exc:
                raise SourceError(str(target), f"cannot write: {exc.strerror or exc}") from None
            report.changed_file(f"wrote {target} from {item.path}: {regions_of(item)}")
        report.note(f"run it with the other modules of {script.parent or '.'} importable, e.g. "
                    f"PYTHONPATH={script.parent or '.'} python {target_of(project.entry)}; or use `autoitt profile`")
        return
    if modules:
        names = ", ".join(item.relative for item in modules)
        report.note(f"{script} imports local modules with training loops too ({names}): -o DIR/ writes every "
                    f"instrumented file, and `autoitt profile {script}` runs them without touching this folder")
    if result.outcome is Outcome.NOTHING_TO_DO:
        report.unchanged_file(f"{script}: no training loops in the script itself; nothing written")
        return
    target = target_of(project.entry)
    summary = regions_of(project.entry)

    if not in_place and files.same_file(target, script):
        raise SourceError(str(target), "is the script itself; use --in-place to rewrite the script (a backup is kept)")
    if not target.parent.is_dir():
        raise SourceError(str(target), f"cannot write: folder {target.parent} does not exist")
    if target.is_dir():
        raise SourceError(str(target), "is a directory; give a file name for the copy")
    if in_place:
        backup = files.backup_path(script)
        if backup.exists() and not force:
            raise SourceError(str(backup), "backup exists already; move it away or pass --force")
        try:
            files.copy_backup(script, backup)
        except OSError as exc:
            raise SourceError(str(backup), f"cannot write the backup: {exc.strerror or exc}") from None
        try:
            files.atomic_write(script, result.output, mode_from=script)
        except OSError as exc:
            backup.unlink()  # the script is untouched, so its fresh backup goes too
            raise SourceError(str(script), f"cannot write: {exc.strerror or exc}") from None
        report.changed_file(f"rewrote {script} in place (original kept as {backup}): {summary}")
        return
    if target.exists() and not force and not files.written_by_autoitt(target):
        raise SourceError(str(target), "exists and was not written by autoitt; choose another -o or pass --force")
    try:
        files.atomic_write(target, result.output, mode_from=script)
    except OSError as exc:
        raise SourceError(str(target), f"cannot write: {exc.strerror or exc}") from None
    report.changed_file(f"wrote {target} from {script}: {summary}")
    report.note(f"next: vtune -collect hotspots -start-paused -- {Path(sys.executable).name} {target}")


def _print_diff(result, script: Path, target: Path, style: str, color: Optional[bool]) -> None:
    from .diff import colorize, marker_diff, unified_diff

    encoding = result.source.encoding
    original = result.source.text
    instrumented = result.output.decode(encoding)
    if style == "unified":
        text = unified_diff(original, instrumented, str(script), str(target))
    else:
        text, _ = marker_diff(original, instrumented, str(script), str(target))
    use_color = sys.stdout.isatty() if color is None else color
    click.echo(colorize(text) if use_color else text, nl=False, color=use_color)


@cli.command(epilog=_EPILOG)
@click.argument("script", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help='One JSON array, an object per region: {"line", "end_line", "role", "function", "label", '
                   '"reason", "path"}; path is relative to SCRIPT\'s folder.')
@_label_option
def loops(script: Path, as_json: bool, labels: Tuple[Tuple[int, str], ...]) -> None:
    """List the training regions autoitt finds in SCRIPT (and the modules of its
    own folder it imports), and why.

    Roles: epoch (a loop around step loops, or over epochs), step (one
    parameter update per iteration), eval (forward passes without updates),
    train-call (one call that trains inside a library, e.g. model.fit).
    Lines are those of SCRIPT as it is on disk. Writes nothing.
    """
    report = Report(quiet=as_json)
    _run_guarded(report, lambda: _list_loops(report, script, as_json, labels))
    sys.exit(int(report.exit_code))


def _list_loops(report: Report, script: Path, as_json: bool, labels) -> None:
    from transforms import detect

    from .project import discover, note_line

    local, notes = discover(script)
    found = []  # (relative path, region)
    all_notes = []
    instrumented_by = None
    for index, item in enumerate(local):
        detection = detect(item.source, dict(labels) if index == 0 else None)
        instrumented_by = instrumented_by or (detection.already_instrumented if index == 0 else None)
        found.extend((item.relative, region) for region in detection.regions)
        shown = script if index == 0 else item.relative
        all_notes.extend(note_line(shown, n) for n in detection.notes)
    all_notes.extend(notes)
    if as_json:
        click.echo(json.dumps([{**region.to_json(), "path": path} for path, region in found], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False, highlight=False)
    if instrumented_by:
        console.print(f"{script} is already instrumented by {instrumented_by}.")
    if not found:
        console.print(f"{script}: no training loops found.")
    else:
        several = len({path for path, _ in found}) > 1 or len(local) > 1
        table = Table(title=f"Training regions in {script}" + (" and the local modules it imports" if several else ""),
                      title_justify="left")
        for column in (("file",) if several else ()) + ("line", "role", "function", "label", "why"):
            table.add_column(column, overflow="fold")
        for path, region in found:
            lines = f"{region.line}-{region.end_line}" if region.end_line != region.line else str(region.line)
            row = (lines, region.role, region.function or "(module)", region.label, region.reason)
            table.add_row(*((path,) + row if several else row))
        console.print(table)
    for note in all_notes:
        console.print(f"[dim]{note}[/dim]")


@cli.command(epilog=_EPILOG)
@click.argument("copy", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Write the result here instead of printing it.")
@click.option("--in-place", is_flag=True, help="Rewrite COPY itself (a backup is kept as COPY.orig).")
@click.option("--force", is_flag=True, help="Replace an output file (or backup) that is in the way.")
def strip(copy: Path, output: Optional[Path], in_place: bool, force: bool) -> None:
    """Remove autoitt's markers from an instrumented COPY, and nothing else.

    The result is the script as it was before `autoitt instrument`, byte for
    byte (every rewrite is checked to undo this way before it is written).
    Prints to stdout unless -o or --in-place is given. A copy whose markers
    were edited by hand is refused (exit 2) rather than half stripped.
    """
    if in_place and output is not None:
        raise click.UsageError("--in-place and --output exclude each other")
    report = Report()

    def run() -> None:
        from transforms import SourceError, strip_markers

        from . import files

        original = strip_markers(files.read_script(copy), str(copy))
        if output is None and not in_place:
            sys.stdout.flush()
            sys.stdout.buffer.write(original)
            sys.stdout.buffer.flush()
            return
        target = copy if in_place else output
        if not in_place and target.exists() and not force:
            raise SourceError(str(target), "exists; choose another -o or pass --force")
        if in_place:
            backup = files.backup_path(copy)
            if backup.exists() and not force:
                raise SourceError(str(backup), "backup exists already; move it away or pass --force")
            files.copy_backup(copy, backup)
        try:
            files.atomic_write(target, original, mode_from=copy)
        except OSError as exc:
            raise SourceError(str(target), f"cannot write: {exc.strerror or exc}") from None
        report.changed_file(f"wrote {target}: {copy} without autoitt's markers")

    _run_guarded(report, run)
    sys.exit(int(report.exit_code))


def _parse_analyses(ctx: click.Context, param: click.Parameter, value: Optional[str]):
    from .vtune_cli import ANALYSES, parse_analyses

    try:
        return parse_analyses(value) if value is not None else tuple(ANALYSES)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _parse_shell_words(ctx: click.Context, param: click.Parameter, values: Tuple[str, ...]) -> Tuple[str, ...]:
    """Each value split as a shell would: `--launcher "mpirun -n 4"`, `--vtune-arg "-knob sampling-interval=5"`."""
    from .vtune_cli import split_args

    try:
        words = split_args(values)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}: {' '.join(values)!r}") from None
    if values and not words:
        raise click.BadParameter("is empty")
    return words


#: The VTune backend's options: (parameter name, flag), to name those given with the built-in backend.
_VTUNE_FLAGS = (("analysis", "--analysis"), ("vtune_args", "--vtune-arg"), ("sampling_mode", "--sampling-mode"),
                ("data_limit", "--data-limit"), ("launcher", "--launcher"))


def _vtune_options(command):
    """The options of the VTune backend (``autoitt profile``); ignored, with a note, by the built-in one."""
    from .vtune_cli import DEFAULT_DATA_LIMIT_MB, SAMPLING_MODES

    for option in reversed([
        click.option("--analysis", metavar="LIST", callback=_parse_analyses,
                     help="VTune analyses to run, in this order: hotspots,uarch (uarch = uarch-exploration with "
                          "memory bandwidth). Default: both."),
        click.option("--sampling-mode", type=click.Choice(SAMPLING_MODES), default="sw", show_default=True,
                     help="Hotspots sampling: sw (user-mode, no driver needed) or hw (hardware event-based)."),
        click.option("--data-limit", type=click.IntRange(min=0), default=DEFAULT_DATA_LIMIT_MB, show_default=True,
                     metavar="MB", help="VTune's -data-limit; 0 is unlimited (a limit stops collection early, "
                                        "so the profile would cover the first steps only)."),
        click.option("--vtune-arg", "vtune_args", multiple=True, metavar="ARGS", callback=_parse_shell_words,
                     help="Extra options for every `vtune -collect`, split as a shell would "
                          "(--vtune-arg '-knob sampling-interval=5'); repeatable."),
        click.option("--launcher", metavar="CMD", callback=lambda ctx, param, value: _parse_shell_words(
                         ctx, param, () if value is None else (value,)),
                     help='Run VTune inside this launcher, e.g. "mpirun -n 4" (one vtune per rank; every '
                          "per-rank result folder is read back)."),
    ]):
        command = option(command)
    return command


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}, epilog=_EPILOG)
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-r", "--result-dir", type=click.Path(path_type=Path),
              help="Folder for the results (must be new or empty). Default: autoitt-results/<stem>-<n>/.")
@click.option("--backend", type=click.Choice(["auto", "builtin", "vtune"]), default="auto", show_default=True,
              help="auto: VTune when a vtune executable is found, else the built-in ITT collector.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON on stdout (the script's own output then goes to stderr).")
@_mode_options
@_vtune_options
def profile(script: Path, args: Tuple[str, ...], result_dir: Optional[Path], backend: str, as_json: bool,
            domain: Optional[str], no_torch_ops: bool, skip_steps: int, steps: Optional[int], pt_regions: bool,
            labels: Tuple[Tuple[int, str], ...], analysis: Tuple[str, ...], sampling_mode: str, data_limit: int,
            vtune_args: Tuple[str, ...], launcher: Tuple[str, ...]) -> None:
    """Instrument SCRIPT into a result folder, run it, and show where training time goes.

    autoitt's options go before SCRIPT; everything after SCRIPT goes to the
    script (`autoitt profile -r out train.py --epochs 3`). The copy runs with the same interpreter, in the current
    folder, with the script's own __file__, sys.argv[0] and sys.path[0], so
    it behaves as `python SCRIPT ARGS...` would; a failing script's exit code
    becomes autoitt's.

    With the built-in backend (no VTune needed), autoitt's ITT collector
    records every ITT task of the run (autoitt's markers, PyTorch operators
    via emit_itt, oneDNN primitives inside TensorFlow) and writes, in the
    result folder: the copy, instrument.diff, loops.json, trace.json (open in
    ui.perfetto.dev), summary.json and steps.svg.

    With the VTune backend, VTune runs the copy twice, through the same
    launcher: hotspots (-start-paused, so only training is collected), then
    uarch-exploration; each is read back with `vtune -report` (CSV files kept
    in csv/) into a summary of CPU time per ITT task, top functions (lines of
    the original script) and top-down metrics per task. Results go to
    hotspots/ and uarch/ in the result folder (open with vtune-gui). If an
    analysis fails, VTune's error lines are shown, the others are still
    reported, and autoitt exits 2.
    """
    from click.core import ParameterSource

    from .vtune_cli import VTuneOptions

    mode = _mode(domain, no_torch_ops, skip_steps, steps, pt_regions, labels)
    vtune = VTuneOptions(analyses=analysis, sampling_mode=sampling_mode, data_limit_mb=data_limit,
                         extra_args=vtune_args, launcher=launcher)
    context = click.get_current_context()
    vtune_given = [flag for name, flag in _VTUNE_FLAGS
                   if context.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    report = Report(quiet=as_json)
    outcome = {}

    def run() -> None:
        from .profiling import analyse, profile as run_profile
        from .summary import console_for_stdout, render

        folder, info = run_profile(script, args, mode, result_dir, backend, report.note, stdout_to_stderr=as_json,
                                   vtune_options=vtune, vtune_flags_given=vtune_given)
        summary = analyse(folder, info)
        if as_json:
            click.echo(json.dumps(summary.to_json(), indent=2))
        else:
            render(summary, console_for_stdout(), script=str(script), backend=info.backend,
                   result_dir=folder, own_domain=info.domain)
        outcome["exit"] = info.exit_code
        if info.exit_code:
            report.input_error(f"{script} exited with code {info.exit_code} (results so far are in {folder}/)")
        elif summary.vtune is not None and summary.vtune.failed:
            report.input_error(f"VTune could not complete: {', '.join(summary.vtune.failed)} (see above); "
                               f"what did complete is in {folder}/")

    _run_guarded(report, run)
    code = outcome.get("exit")
    sys.exit(code if code else int(report.exit_code))


@cli.command(epilog=_EPILOG)
@click.argument("result_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def report(result_dir: Path, as_json: bool) -> None:
    """Print the summary of an earlier `autoitt profile` run again (from RESULT_DIR)."""
    outcome = Report(quiet=as_json)

    def run() -> None:
        from .profiling import analyse
        from .results import RunInfo
        from .summary import console_for_stdout, render

        info = RunInfo.load(result_dir)
        summary = analyse(result_dir, info)
        if as_json:
            click.echo(json.dumps(summary.to_json(), indent=2))
        else:
            render(summary, console_for_stdout(), script=info.script, backend=info.backend,
                   result_dir=result_dir, own_domain=info.domain)

    _run_guarded(outcome, run)
    sys.exit(int(outcome.exit_code))


def main() -> None:
    cli(prog_name="autoitt")


if __name__ == "__main__":
    main()
