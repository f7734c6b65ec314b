"""The option groups of ``autoitt profile`` and ``report`` (the VTune backend's, the built-in backend's), the
options naming and placing regions (``--label``, ``--role``, ``--domain``), and the click callbacks that check
their values. :mod:`instrumenter.cli` puts them on its commands."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import click

from ..profile.console import printable
from ..profile.options import (ANALYSES, DEFAULT_DATA_LIMIT_MB, DEFAULT_SAMPLE_HZ, DEFAULT_TIMER_SAMPLE_HZ,
                               DEFAULT_TRACE_LIMIT, SAMPLING_MODES,
                      parse_analyses, parse_size, split_args)


def parse_analyses_option(ctx: click.Context, param: click.Parameter, value: Optional[str]):
    try:
        return parse_analyses(value) if value is not None else tuple(ANALYSES)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def shell_words(ctx: click.Context, param: click.Parameter, values: Tuple[str, ...]) -> Tuple[str, ...]:
    """Each value split as a shell would: `--launcher "mpirun -n 4"`, `--vtune-arg "-knob sampling-interval=5"`."""
    try:
        words = split_args(values)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}: {' '.join(values)!r}") from None
    if values and not words:
        raise click.BadParameter("is empty")
    return words


#: The VTune backend's options: (parameter name, flag), to name those given when another backend runs.
VTUNE_FLAGS = (("analysis", "--analysis"), ("vtune_args", "--vtune-arg"), ("sampling_mode", "--sampling-mode"),
                ("data_limit", "--data-limit"))


def vtune_options(command):
    """The options of the VTune backend (``autoitt profile``); ignored, with a note, by the built-in one."""
    for option in reversed([
        click.option("--analysis", metavar="LIST", callback=parse_analyses_option,
                     help="VTune analyses to run, in this order: hotspots,uarch (uarch = uarch-exploration with "
                          "memory bandwidth). Default: both."),
        click.option("--sampling-mode", type=click.Choice(SAMPLING_MODES), default="sw", show_default=True,
                     help="Hotspots sampling: sw (user-mode, no driver needed) or hw (hardware event-based)."),
        click.option("--data-limit", type=click.IntRange(min=0), default=DEFAULT_DATA_LIMIT_MB, show_default=True,
                     metavar="MB", help="VTune's -data-limit; 0 is unlimited (a limit stops collection early, "
                                        "so the profile would cover the first steps only)."),
        click.option("--vtune-arg", "vtune_args", multiple=True, metavar="ARGS", callback=shell_words,
                     help="Extra options for every `vtune -collect`, split as a shell would "
                          "(--vtune-arg '-knob sampling-interval=5'); repeatable."),
        click.option("--launcher", metavar="CMD", callback=lambda ctx, param, value: shell_words(
                         ctx, param, () if value is None else (value,)),
                     help='Run the script through this launcher, one process per rank: "mpirun -n 4", '
                          '"srun", "torchrun --nproc_per_node 2", "accelerate launch --multi_gpu --num_processes 2", '
                          '"deepspeed --num_gpus 2" (found on PATH or beside autoitt\'s Python). With VTune, one vtune '
                          "per rank (every per-rank result folder is read back)."),
    ]):
        command = option(command)
    return command


def checked(parse: Callable[[str], object]):
    """A callback giving ``parse(value)`` (``None`` stays ``None``), its ``ValueError`` as a bad parameter."""
    def callback(ctx: click.Context, param: click.Parameter, value: Optional[str]):
        try:
            return None if value is None else parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return callback


def window(text: str):
    """``--trace-steps``, parsed once here into the :class:`~instrumenter.profile.step_window.StepWindow` handed
    forward (which keeps the text, for the record)."""
    from ..profile.step_window import StepWindow

    return StepWindow.parse(text)


trace_steps_option = click.option(
    "--trace-steps", metavar="auto|all|A-B,...,-N", callback=checked(window),
    help="Which steps trace.json keeps every task of (operators, primitives; the run's own markers are always "
         "kept): auto (the default) keeps everything up to a million tasks, else steps 2-11 and the last 10, "
         "whole steps while they hold at most a million tasks; "
         "all; or steps A-B, A, and -N for the last N. Statistics always cover the whole run. Built-in backend.")


trace_limit_option = click.option(
    "--trace-limit", metavar="SIZE", default=f"{DEFAULT_TRACE_LIMIT >> 30}G", show_default=True,
    callback=checked(parse_size),
    help="Bytes each process's trace file may take (500M, 10G, none); past them the collector counts tasks "
         "instead of recording them: statistics stay exact, the timeline stops. Built-in backend.")


verbose_option = click.option(
    "-v", "--verbose", is_flag=True,
    help="Show every table: the tasks of each domain (autoitt's regions, PyTorch's, oneDNN's), all top "
         "operators, every task's hotspots. Without it the summary is one screen: steps, phases, top operators, "
         "hotspots, notes.")


def sample_rate(text: str) -> Optional[int]:
    """``--sample-rate``: samples per second of a thread's CPU time, 0 (or ``off``) for none, None for ``auto``."""
    from ..profile.options import MAX_SAMPLE_HZ

    if text.strip().lower() in ("off", "none"):
        return 0
    if text.strip().lower() == "auto":
        return None
    try:
        rate = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of samples per second (e.g. 1000, 100, or 0 for none)") from None
    if not 0 <= rate <= MAX_SAMPLE_HZ:
        raise ValueError(f"{rate} is outside 0..{MAX_SAMPLE_HZ} samples per second")
    return rate


sample_rate_option = click.option(
    "--sample-rate", metavar="HZ", default="auto", show_default=True, callback=checked(sample_rate),
    help="CPU-time samples per second of each thread, for the hotspots (functions, Python lines and native "
         f"symbols, per task); 0 or off: no sampling. auto: {DEFAULT_SAMPLE_HZ} where perf samples, "
         f"{DEFAULT_TIMER_SAMPLE_HZ} with CPU-time timers (in a VM, where each sample costs a PyTorch step about "
         "0.1 ms; a minute of a busy thread still gets thousands). Built-in backend (with VTune, VTune samples).")


def _per_line(values: Sequence[str], metavar: str, example: str,
              refused: Callable[[str], Optional[str]]) -> Tuple[Tuple[int, str], ...]:
    """The (line, value) pairs of a repeatable ``LINE=VALUE`` option; ``refused`` says why a value is not
    allowed, or ``None``."""
    pairs = []
    for given in values:
        line, sep, value = given.partition("=")
        value = value.strip()
        if not sep or not line.strip().isdigit() or not value:
            raise click.BadParameter(f"expected {metavar} (e.g. {example}), got {given!r}")
        why = refused(value)
        if why:
            raise click.BadParameter(why)
        pairs.append((int(line), value))
    return tuple(pairs)


def _name_refused(what: str, name: str) -> Optional[str]:
    """Why an ITT name given on the command line (a label, a domain) is refused, or ``None``: it becomes a
    task or domain of every trace, table and plot, so it is one line of visible text; no quotes or
    backslashes, and no control character (newline, escape, DEL, C1, U+2028, a bidirectional override:
    see :func:`~instrumenter.profile.console.printable`). The message shows the first such character escaped."""
    bad = next((char for char in name if char in "\"\\" or printable(char) != char), None)
    if bad is None:
        return None
    return (f"{what} cannot contain quotes, backslashes or control characters (newline, escape, ...): "
            f"{printable(repr(bad))} in {printable(repr(name))}")


def _parse_labels(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> Tuple[Tuple[int, str], ...]:
    return _per_line(values, "LINE=NAME", "42=warmup", lambda name: _name_refused("a label", name))


def parse_domain(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    why = _name_refused("a domain", value) if value is not None else None
    if why:
        raise click.BadParameter(why)
    return value


label_option = click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="LINE=NAME",
    callback=_parse_labels,
    help="Name the task of the loop (or call) on LINE of the original script; repeatable.",
)

#: What ``--role`` may set: a region's role, or ``skip`` (as the ``# autoitt:`` comments do).
_ROLE_CHOICES = ("step", "epoch", "eval", "train-call", "skip")


def _parse_roles(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> Tuple[Tuple[int, str], ...]:
    return _per_line(values, "LINE=ROLE", "42=eval", lambda role: (
        None if role in _ROLE_CHOICES else f"expected LINE=ROLE with ROLE one of {', '.join(_ROLE_CHOICES)}, "
                                           f"got {role!r}"))


role_option = click.option(
    "--role",
    "roles",
    multiple=True,
    metavar="LINE=ROLE",
    callback=_parse_roles,
    help="Set the role of the loop (or call) on LINE of the original script, as a '# autoitt: ROLE' comment "
         "there would, without editing it: step, epoch, eval, train-call (a call that trains inside a library) "
         "or skip; repeatable.",
)
