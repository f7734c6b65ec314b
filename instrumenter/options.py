"""The options of ``autoitt profile``, parsed once by the CLI into one frozen object handed down.

What is inserted is the :class:`~transforms.Mode`; the rest says where the
results go, which backend collects, and how VTune runs when it does.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

if TYPE_CHECKING:  # the CLI imports these options to build its help; transforms is not needed for that
    from transforms import Mode

#: The ``--backend`` choices: auto picks VTune where it is installed, else the built-in collector.
BACKENDS = ("auto", "builtin", "vtune")

#: autoitt's VTune analysis names, in the order they always run, and VTune's names for them.
ANALYSES: Dict[str, str] = {"hotspots": "hotspots", "uarch": "uarch-exploration"}
SAMPLING_MODES = ("sw", "hw")

#: ``-data-limit`` in MB; 0 is unlimited. VTune stops collecting when the limit
#: is reached (historic defaults: 100, then 500 MB), and a profile cut off that
#: way covers the first steps only -- the warm-up -- while looking complete.
#: Collection is already narrowed to training by -start-paused, and --steps
#: bounds it further, so autoitt passes "unlimited" unless told otherwise.
DEFAULT_DATA_LIMIT_MB = 0


def parse_analyses(text: str) -> Tuple[str, ...]:
    """``"uarch,hotspots"`` -> ``("hotspots", "uarch")``: known names only, always in run order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ANALYSES]
    if unknown or not names:
        raise ValueError(f"expected a comma list of {', '.join(ANALYSES)}; got {text!r}")
    return tuple(name for name in ANALYSES if name in names)


#: ``python -m torch.distributed.run`` is torchrun; ``torch.distributed.launch`` its deprecated form.
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
#: torchrun's flag for "run the program as it is, not as a Python script" (both spellings are torchrun's).
NO_PYTHON = ("--no-python", "--no_python")


def torchrun_at(launcher: Sequence[str]) -> Optional[int]:
    """Where torchrun's own options begin in ``launcher``, or None if torchrun is not in it.

    torchrun may follow another launcher's words (``srun -N 2 torchrun ...``,
    ``mpirun -n 1 python -m torch.distributed.run ...``), so every word is
    looked at: a ``torchrun`` executable, or ``-m`` with torchrun's module.
    """
    for i, word in enumerate(launcher):
        if Path(word).name == "torchrun":
            return i + 1
        if word == "-m" and i + 1 < len(launcher) and launcher[i + 1] in TORCHRUN_MODULES:
            return i + 2
    return None


def under_launcher(launcher: Sequence[str], command: Sequence[str], *, python: bool = True) -> Tuple[str, ...]:
    """``command`` run by ``launcher``, one process per rank.

    ``mpirun``, ``srun`` and the like start any program: ``mpirun -n 2 python
    ...``. torchrun starts a Python script with its own interpreter unless
    given ``--no-python``, so under torchrun:

    * ``python`` (``command`` is ``python SCRIPT ARGS``): the interpreter is
      left out and torchrun's runs the script, as torchrun is used; if the user
      gave ``--no-python``, ``command`` is kept whole (torchrun runs it as it is);
    * otherwise (``command`` is a program, ``vtune ...``): ``--no-python`` is
      added right after the torchrun word unless the user gave it, since
      torchrun would run the program as a Python script.
    """
    at = torchrun_at(launcher)
    if at is None or any(word in NO_PYTHON for word in launcher[at:]):
        return (*launcher, *command)
    if python:
        return (*launcher, *command[1:])
    return (*launcher[:at], NO_PYTHON[0], *launcher[at:], *command)


def vtune_launcher_problem(launcher: Sequence[str]) -> Optional[str]:
    """Why ``launcher`` cannot run vtune per rank, or None.

    vtune needs ``--no-python`` under torchrun; the deprecated
    ``torch.distributed.launch`` refuses it without ``--use-env`` (it would
    otherwise pass ``--local-rank`` to the program), and adding ``--use-env``
    for the user would change what their script is given.
    """
    at = torchrun_at(launcher)
    if at is None or launcher[at - 1] != "torch.distributed.launch":
        return None
    if any(word in ("--use-env", "--use_env") for word in launcher[at:]):
        return None
    return ("torch.distributed.launch runs only Python scripts unless given --use-env (the script then reads its "
            "local rank from LOCAL_RANK, not --local-rank); add --use-env, or use torchrun")


#: ``--trace-limit``'s default, 2G: a process's trace file stops growing there (its statistics do not).
DEFAULT_TRACE_LIMIT = 2 << 30
#: ``--sample-rate``'s default: samples per second of each thread's CPU time (1 ms of CPU a sample).
DEFAULT_SAMPLE_HZ = 1000
#: The highest rate asked for: above it the signal handler's cost would be a sizeable share of the CPU.
MAX_SAMPLE_HZ = 10000
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> Optional[int]:
    """``--trace-limit``: bytes from ``500M``, ``2G``, ``1.5G``, ``100000`` (K, M, G, T are powers of 1024, a
    trailing ``B`` or ``iB`` is allowed); ``none`` or ``0``: no limit (``None``). ``ValueError`` otherwise."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    if value in ("NONE", "0"):
        return None
    number, unit = (value[:-1], value[-1]) if value[-1:] in _SIZE_UNITS and value[-1:] else (value, "")
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"{text!r}: expected a size such as 500M, 2G or 100000 (bytes), or none") from None
    if size < 64 * 1024:
        raise ValueError(f"{text!r}: at least 64K (one buffer of the collector), or none")
    return size


def split_args(values: Sequence[str]) -> Tuple[str, ...]:
    """Each value is split as a shell would (``"-knob sampling-interval=5"`` is two arguments)."""
    return tuple(arg for value in values for arg in shlex.split(value))


@dataclass(frozen=True)
class VTuneOptions:
    """How VTune runs (ignored, with a note, by the built-in backend)."""

    analyses: Tuple[str, ...] = tuple(ANALYSES)
    sampling_mode: str = "sw"
    data_limit_mb: int = DEFAULT_DATA_LIMIT_MB
    extra_args: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileOptions:
    """Everything ``autoitt profile`` was asked, before SCRIPT and its arguments.

    ``json_output``: the summary goes to stdout as JSON, so the script's own
    output goes to stderr. ``vtune_flags_given``: the VTune options the user
    typed, named in the note that the built-in backend ignores them.
    """

    mode: "Mode"
    backend: str = "auto"
    result_dir: Optional[Path] = None
    #: A launcher the run goes through, e.g. ``("mpirun", "-n", "4")``: one process (one vtune) per rank.
    launcher: Tuple[str, ...] = ()
    json_output: bool = False
    #: which steps trace.json keeps every task of (``--trace-steps``; see instrumenter.builtin.timeline)
    trace_steps: str = "auto"
    #: bytes a process's trace file may take (``--trace-limit``), None: no limit; built-in backend
    trace_limit: Optional[int] = DEFAULT_TRACE_LIMIT
    #: CPU-time samples per second of each thread (``--sample-rate``), 0: no sampling; built-in backend
    sample_hz: int = DEFAULT_SAMPLE_HZ
    vtune: VTuneOptions = field(default_factory=VTuneOptions)
    vtune_flags_given: Tuple[str, ...] = ()
