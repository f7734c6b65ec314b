"""The ``autoitt`` command line: options, help and exit codes over the modules that do the work.

``instrument``/``strip``: :mod:`instrumenter.cli.copies`; ``loops``:
:mod:`instrumenter.cli.listing`; ``profile``/``report``:
:mod:`instrumenter.cli.profiling` and a backend; ``compare``: :mod:`instrumenter.cli.comparing` and
:mod:`instrumenter.comparison`. Each command counts its
outcomes in a :class:`~instrumenter.cli.tally.Tally`, which chooses the exit code.
Heavy imports (libcst, rich, the backends) happen inside the commands that
need them, so ``autoitt --help`` starts quickly.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Optional, Tuple

import click

from .. import __version__
from .diff import STYLES
from .option_groups import (VTUNE_FLAGS, label_option, parse_domain, role_option, sample_rate_option,
                            trace_limit_option, trace_steps_option, verbose_option, vtune_options)
from ..profile.options import BACKENDS, BuiltinOptions, VTuneOptions
from ..runtime.torch_ops import DEFAULT_EVERY, DEFAULT_LATER_EVERY, DEFAULT_UNTIL, TORCH_OPS
from .tally import Tally

_EPILOG = """\b
Examples:
  autoitt loops train.py              what would be marked, and why
  autoitt instrument train.py --diff  preview the markers, write nothing
  autoitt instrument train.py         write train_itt.py next to train.py
  vtune -collect hotspots -start-paused -- python train_itt.py
"""


def _mode_options(command):
    """The options that decide what is inserted, shared by instrument and profile."""
    for option in reversed([
        click.option("--domain", metavar="NAME", callback=parse_domain,
                     help="ITT domain for the markers. Default: autoitt.<script stem>."),
        click.option("--torch-ops", type=click.Choice(TORCH_OPS), default=None,
                     help="PyTorch's operators as ITT tasks (torch.autograd.profiler.emit_itt()): all, in every step; "
                          f"sampled, in the steps --trace-steps names (2-11) and every {DEFAULT_EVERY}th step and "
                          f"eval iteration to the {DEFAULT_UNTIL}th, every {DEFAULT_LATER_EVERY}th after, so that "
                          "small operators cost the run little (phases and the operator table then come from "
                          "those steps, scaled); off, none. Default: sampled for profile "
                          "with the built-in collector; all for instrument and for VTune, whose reports cannot be "
                          "scaled."),
        click.option("--no-torch-ops", is_flag=True, hidden=True, help="The same as --torch-ops off."),
        click.option("--skip-steps", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
                     help="Start collecting at step N+1 (steps counted across epochs), leaving warm-up out."),
        click.option("--steps", type=click.IntRange(min=1), default=None, metavar="M",
                     help="Collect M steps, then pause. Default: to the end of training."),
        click.option("--pt-regions", is_flag=True,
                     help="Also mark each step loop for VTune anomaly detection (itt.pt_region_*; at most 8)."),
        label_option,
        role_option,
    ]):
        command = option(command)
    return command


def _torch_ops(torch_ops: Optional[str], no_torch_ops: bool, default: str) -> str:
    """``--torch-ops`` as given, ``off`` for the older ``--no-torch-ops``, else ``default``."""
    if no_torch_ops:
        if torch_ops not in (None, "off"):
            raise click.UsageError(f"--no-torch-ops and --torch-ops {torch_ops} contradict each other")
        return "off"
    return torch_ops or default


def _mode(domain, torch_ops, skip_steps, steps, pt_regions, labels, roles):
    from transforms import Mode

    return Mode(domain=domain, torch_ops=torch_ops, skip_steps=skip_steps, steps=steps,
                pt_regions=pt_regions, labels=labels, roles=roles)


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
@click.option("--diff-style", type=click.Choice(list(STYLES)), default="markers", show_default=True,
              help="markers: indentation changes shown as context, so inserted lines stand out; "
                   "unified: a strict diff that patch can apply.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if markers would be added, 0 if the script is already "
                   "instrumented or has nothing to instrument.")
@_mode_options
@click.option("--color/--no-color", default=None, help="Colour the diff. Default: when printing to a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
def instrument(script: Path, output: Optional[str], in_place: bool, force: bool, show_diff: bool,
               diff_style: str, check: bool, domain: Optional[str], torch_ops: Optional[str], no_torch_ops: bool,
               skip_steps: int,
               steps: Optional[int], pt_regions: bool, labels: Tuple[Tuple[int, str], ...],
               roles: Tuple[Tuple[int, str], ...], color: Optional[bool], quiet: bool) -> None:
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
    # The command's objects (modules, trees) live until it ends, so the cyclic collector would only walk
    # them again and again (some 10 ms of a 0.25 s run); the few hundred cyclic objects it leaves go
    # with the process.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from .copies import instrument as write_copies
        from ..sources.files import WriteBack

        mode = _mode(domain, _torch_ops(torch_ops, no_torch_ops, "all"), skip_steps, steps, pt_regions, labels, roles)
        tally = Tally(check=check, quiet=quiet)
        write_back = WriteBack.from_flags(check=check, diff=show_diff, in_place=in_place)
        _run_guarded(tally, lambda: write_copies(tally, script, mode, write_back, output=output, in_place=in_place,
                                                 force=force, diff_style=diff_style, color=color))
    finally:
        if collecting:  # called in-process (tests), the caller collects again
            gc.enable()
    sys.exit(int(tally.exit_code))


#: The exit status of a command stopped by Ctrl-C, as a shell reports it.
_INTERRUPTED = 128 + 2


def _run_guarded(tally: Tally, action) -> None:
    """Turn any unexpected exception into exit code 123 with a useful message."""
    from transforms import RewriteError, SourceError

    from ..sources.files import OutputError

    try:
        action()
    except (SourceError, OutputError) as exc:
        tally.input_error(str(exc))
    except RewriteError as exc:
        tally.internal_error(str(exc))
    except (KeyboardInterrupt, click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # noqa: BLE001 - the contract is exit 123, never a bare traceback
        import traceback

        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
        tally.internal_error(f"{type(exc).__name__}: {exc}\n{detail.rstrip()}")


@cli.command(epilog=_EPILOG)
@click.argument("script", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help='One JSON array, an object per region: {"line", "end_line", "role", "function", "label", '
                   '"reason", "path"}; path is relative to SCRIPT\'s folder.')
@label_option
@role_option
def loops(script: Path, as_json: bool, labels: Tuple[Tuple[int, str], ...], roles: Tuple[Tuple[int, str], ...]) -> None:
    """List the training regions autoitt finds in SCRIPT (and the modules of its
    own folder it imports), and why.

    Roles: epoch (a loop around step loops, or over epochs), step (one
    parameter update per iteration), eval (forward passes without updates),
    train-call (one call that trains inside a library, e.g. model.fit).
    Lines are those of SCRIPT as it is on disk. Writes nothing.
    """
    from .listing import show_loops

    tally = Tally(quiet=as_json)
    _run_guarded(tally, lambda: show_loops(script, as_json, dict(labels), dict(roles)))
    sys.exit(int(tally.exit_code))


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
    from .copies import strip as write_original
    from ..sources.files import WriteBack

    tally = Tally()
    write_back = WriteBack.IN_PLACE if in_place else WriteBack.WRITE if output is not None else WriteBack.STDOUT
    _run_guarded(tally, lambda: write_original(tally, copy, write_back, output, force))
    sys.exit(int(tally.exit_code))


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}, epilog=_EPILOG)
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-r", "--result-dir", type=click.Path(path_type=Path),
              help="Folder for the results (must be new or empty). Default: autoitt-results/<stem>-<n>/.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="auto: VTune when a vtune executable is found, else the built-in ITT collector.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON on stdout (the script's own output then goes to stderr).")
@trace_steps_option
@trace_limit_option
@sample_rate_option
@verbose_option
@_mode_options
@vtune_options
def profile(script: Path, args: Tuple[str, ...], result_dir: Optional[Path], backend: str, as_json: bool,
            trace_steps, trace_limit: Optional[int], sample_rate: Optional[int], verbose: bool,
            domain: Optional[str], torch_ops: Optional[str], no_torch_ops: bool, skip_steps: int,
            steps: Optional[int], pt_regions: bool,
            labels: Tuple[Tuple[int, str], ...], roles: Tuple[Tuple[int, str], ...], analysis: Tuple[str, ...],
            sampling_mode: str, data_limit: int, vtune_args: Tuple[str, ...], launcher: Tuple[str, ...]) -> None:
    """Instrument SCRIPT into a result folder, run it, and show where training time goes.

    autoitt's options go before SCRIPT; everything after SCRIPT goes to the
    script (`autoitt profile -r out train.py --epochs 3`). The copy runs with
    the same interpreter, in the current folder, with the script's own
    __file__, sys.argv[0] and sys.path[0], so it behaves as `python SCRIPT
    ARGS...` would; its tracebacks show SCRIPT's own lines, and a failing
    script's exit code becomes autoitt's.

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

    from ..profile.options import ProfileOptions

    context = click.get_current_context()
    ops = _torch_ops(torch_ops, no_torch_ops, "sampled")
    options = ProfileOptions(
        mode=_mode(domain, ops, skip_steps, steps, pt_regions, labels, roles), backend=backend,
        torch_ops_given=torch_ops is not None or no_torch_ops,
        result_dir=result_dir, json_output=as_json, launcher=launcher,
        builtin=BuiltinOptions(**({"trace_steps": trace_steps} if trace_steps is not None else {}),
                               trace_limit=trace_limit, sample_hz=sample_rate),
        vtune=VTuneOptions(analyses=analysis, sampling_mode=sampling_mode, data_limit_mb=data_limit,
                           extra_args=vtune_args,
                           given=tuple(flag for name, flag in VTUNE_FLAGS
                                       if context.get_parameter_source(name) is ParameterSource.COMMANDLINE)))
    tally = Tally(quiet=as_json)
    ended = {}

    def run() -> None:
        from .profiling import profile as run_profile
        from ..launch.target import describe, shell_status

        done = run_profile(script, args, options, tally.note)
        code = done.record.exit_code
        if code:
            ended["exit"] = shell_status(code)
        try:
            summary = _show(done, as_json, verbose=verbose)
        except KeyboardInterrupt:
            ended.setdefault("exit", _INTERRUPTED)
            tally.input_error(f"summary interrupted; `autoitt report {done.folder}` prints it from what was "
                              "recorded")
            return
        if code:
            tally.input_error(f"{script} {describe(code)} (results so far are in {done.folder}/)")
        elif done.backend.incomplete(summary):
            tally.input_error(f"{done.backend.incomplete(summary)}; what did complete is in {done.folder}/")
        _unwritten(tally, done.folder, [*done.unwritten, *summary.unwritten])

    _run_guarded(tally, run)
    sys.exit(ended.get("exit") or int(tally.exit_code))


@cli.command(epilog=_EPILOG)
@click.argument("result_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--recompute", is_flag=True,
              help="Read everything collected again (and rewrite summary.json, trace.json, steps.svg, report.html) "
                   "instead of printing the saved summary.")
@click.option("--html", "html", is_flag=True,
              help="Write report.html in RESULT_DIR (the run on one page, offline: reads everything again) and say "
                   "where. The built-in backend's runs.")
@trace_steps_option
@verbose_option
def report(result_dir: Path, as_json: bool, recompute: bool, html: bool, trace_steps, verbose: bool) -> None:
    """Print the summary of an earlier `autoitt profile` run again (from RESULT_DIR).

    The summary saved by the run is printed as it is, whatever the run's length; it is read again from
    what was collected when it is missing or older than the traces, or with --recompute.
    """
    tally = Tally(quiet=as_json)

    def run() -> None:
        from .profiling import load

        done = load(result_dir, trace_steps)  # another window (a StepWindow): the traces are read again
        if html and done.record.backend != "builtin":
            tally.input_error(f"{result_dir} is a {done.record.backend} run: report.html is the built-in backend's")
            return
        summary = _show(done, as_json, recompute or html or trace_steps is not None, verbose)
        if html:
            failed = next((item for item in summary.unwritten if item.name == "report.html"), None)
            if failed is not None:  # asked for: an error even where the folder is not the user's to write
                tally.input_error(f"could not write report.html in {done.folder}/ ({failed.reason})")
                return
            tally.note(f"report.html written: {done.folder / 'report.html'}")
        # a folder the user may not write (someone else's) is still reported; a write that failed is an error
        _unwritten(tally, done.folder, [item for item in summary.unwritten if not item.folder_not_writable])

    _run_guarded(tally, run)
    sys.exit(int(tally.exit_code))


@cli.command(epilog="""\b
Examples:
  autoitt compare autoitt-results/train-1 autoitt-results/train-2
  autoitt compare before/ after/                  each a folder of repeats (autoitt profile -r before/1 ...)
  autoitt compare BASE NEW --fail-if-slower 5     exit 1 when NEW is slower by 5 %, beyond noise
  autoitt compare BASE NEW --json > compare.json
""")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print the comparison as JSON on stdout (fields: README, `autoitt compare`).")
@click.option("--fail-if-slower", "fail_if_slower", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 1 when NEW's steady step median is slower than BASE's by more than PCT percent and beyond "
                   "noise: a CI job can gate on it.")
@click.option("--threshold", type=click.FloatRange(min=0), metavar="PCT", default=None,
              help="The least difference of the steady medians (percent) called beyond noise. Default: 30 with one "
                   "run a side (two runs of one unchanged script differ by up to 20-30 % on a VM), 2 with repeats "
                   "(whose own spread is tested).")
@click.option("--html", "html", type=click.Path(path_type=Path, dir_okay=False), metavar="OUT",
              help="Also write the comparison as a page that opens offline (OUT, e.g. compare.html).")
def compare(base: Path, new: Path, as_json: bool, fail_if_slower: Optional[float], threshold: Optional[float],
            html: Optional[Path]) -> None:
    """Compare two sides, BASE then NEW: each a result folder of `autoitt profile`, or a folder of them (its
    repeats: the noise between runs is then measured, not assumed).

    First a verdict: the step loop's steady median, how it moved, and whether beyond noise. Then each step
    loop (and each rank's), the phases per step, the operators, hotspots and lines of your code that moved
    most (new and gone ones included), the counters and the run's wall time. What only one side has is named.
    """
    tally = Tally(quiet=as_json)

    def run() -> None:
        from .comparing import compare_folders, show

        show(compare_folders(base, new, threshold), as_json, fail_if_slower, tally, html)

    _run_guarded(tally, run)
    sys.exit(int(tally.exit_code))


def _unwritten(tally: Tally, folder: Path, unwritten) -> None:
    """An input error (exit 2: the environment's to fix) naming the result files that could not be written
    (:class:`~instrumenter.profile.results.Unwritten`), by reason; nothing when all were."""
    if not unwritten:
        return
    by_reason = {}
    for item in unwritten:
        by_reason.setdefault(item.reason, []).append(item.name)
    files = "; ".join(", ".join(names) + f" ({reason})" for reason, names in by_reason.items())
    tally.input_error(f"could not write {files} in {folder}/: the result folder is incomplete")


def _show(done, as_json: bool, recompute: bool = True, verbose: bool = False):
    """Read a profile's results (or its saved summary, without ``recompute``), print them (as JSON, or for a
    person); returns the summary."""
    summary = done.summarize(recompute)
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
    else:
        from ..profile.console import console_for_stdout

        done.backend.render(summary, console_for_stdout(), script=done.record.script, result_dir=done.folder,
                            instrumentation=done.instrumentation, verbose=verbose)
    return summary


def main() -> None:
    cli(prog_name="autoitt")


if __name__ == "__main__":
    main()
