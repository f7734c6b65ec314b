"""The options of ``autoitt profile``, parsed once by the CLI into one frozen object handed down.

What is inserted is the :class:`~transforms.Mode`; the rest says where the
results go, which backend collects, and each backend's own options
(:class:`BuiltinOptions`, :class:`VTuneOptions`), which only that backend reads.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from .collector import formats

if TYPE_CHECKING:  # the CLI imports these options to build its help; transforms is not needed for that
    from transforms import Mode

    from .builtin.step_window import StepWindow

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


#: ``accelerate launch`` as a module (``python -m accelerate.commands.launch``); its executables are
#: ``accelerate launch`` and ``accelerate-launch``.
ACCELERATE_MODULES = ("accelerate.commands.launch",)
#: The DeepSpeed launcher as a module; its executable is ``deepspeed``.
DEEPSPEED_MODULES = ("deepspeed.launcher.runner",)
#: DeepSpeed's flag for "give the script no ``--local_rank=N``" (it reads ``LOCAL_RANK`` instead).
NO_LOCAL_RANK = "--no_local_rank"


def script_launcher_at(launcher: Sequence[str]) -> Optional[Tuple[str, int]]:
    """The first launcher in ``launcher`` that runs a Python script with an interpreter of its own --
    ``"torchrun"``, ``"accelerate"`` or ``"deepspeed"`` -- and where its options begin; None if there is none.

    Each may follow another launcher's words (``srun -N 2 torchrun ...``,
    ``mpirun -n 1 python -m torch.distributed.run ...``): every word is looked
    at, an executable by its name or ``-m`` with the launcher's module.
    """
    for i, word in enumerate(launcher):
        name = Path(word).name
        module = launcher[i + 1] if word == "-m" and i + 1 < len(launcher) else None
        if name == "torchrun" or module in TORCHRUN_MODULES:
            return "torchrun", i + (1 if module is None else 2)
        if name == "accelerate" and tuple(launcher[i + 1:i + 2]) == ("launch",) or module in ACCELERATE_MODULES:
            return "accelerate", i + 2
        if name == "accelerate-launch":
            return "accelerate", i + 1
        if name == "deepspeed" or module in DEEPSPEED_MODULES:
            return "deepspeed", i + (1 if module is None else 2)
    return None


def under_launcher(launcher: Sequence[str], command: Sequence[str], *, python: bool = True,
                   args_at: Optional[int] = None) -> Tuple[str, ...]:
    """``command`` run by ``launcher``, one process per rank.

    ``mpirun``, ``srun`` and the like start any program: ``mpirun -n 2 python
    ...``. torchrun, ``accelerate launch`` and ``deepspeed`` start a Python
    script with an interpreter of their own (whichever Python they were
    installed with, or ``$PYTHON_EXEC``) unless given their "no python" flag
    (torchrun's ``--no-python``, the others' ``--no_python``). So under them
    that flag is added right after the launcher's words unless the user gave
    it, and ``command`` runs whole: its own interpreter, autoitt's, runs
    the script's .pyc in every rank, and a program (``vtune ...``,
    ``python=False``) is not run as a Python script. A ``python`` command gets
    ``-u`` (unbuffered output), as torchrun and deepspeed give the scripts they
    run, unless the user gave the flag (the command then runs as it is).

    deepspeed also passes the script ``--local_rank=N`` ahead of its
    arguments, which would land before the script's .pyc: unless
    the user gave ``--no_local_rank``, it is given that flag and the script
    gets ``--local_rank=$LOCAL_RANK`` (the same number) where deepspeed puts
    it, at ``args_at`` in ``command`` (where the script's own arguments begin),
    through ``sh -c``. (With VTune, :func:`vtune_launcher_problem` asks for
    ``--no_local_rank`` instead.)
    """
    found = script_launcher_at(launcher)
    if found is None:
        return (*launcher, *command)
    kind, at = found
    added = []
    flags = NO_PYTHON if kind == "torchrun" else NO_PYTHON[1:]
    if not any(word in flags for word in launcher[at:]):
        added.append(flags[0])
        if python:
            command = (command[0], "-u", *command[1:])
            args_at = None if args_at is None else args_at + 1
    if kind == "deepspeed" and NO_LOCAL_RANK not in launcher[at:]:
        added.append(NO_LOCAL_RANK)
        if python and args_at is not None:
            head = " ".join(shlex.quote(word) for word in command[:args_at])
            command = ("sh", "-c", f'exec {head} --local_rank="$LOCAL_RANK" "$@"', "sh", *command[args_at:])
    return (*launcher[:at], *added, *launcher[at:], *command)


def find_launcher(name: str, python: str = sys.executable, path: Optional[str] = None,
                  virtual: bool = sys.prefix != sys.base_prefix) -> Optional[str]:
    """Where ``--launcher``'s program ``name`` is, or None: a path as it is; a bare name on ``PATH``
    (``path``, else ``$PATH``) and in the folder of autoitt's interpreter ``python``.

    A launcher installed beside autoitt (``.venv/bin/torchrun``, ``accelerate``,
    ``deepspeed``) is found without the environment being activated. In a
    virtual environment (``virtual``) its folder is looked in first, as its
    activation would put it first on ``PATH``: the launcher then belongs to the
    interpreter that runs the ranks. Otherwise (autoitt in ``/usr/bin``, say)
    ``PATH`` comes first. ``python`` is not resolved: a virtual environment's
    interpreter is a link to the base interpreter, elsewhere.
    """
    if os.path.dirname(name):
        return shutil.which(name)
    here = os.path.dirname(python) if python else ""
    search = os.environ.get("PATH", os.defpath) if path is None else path
    folders = [here, search] if virtual else [search, here]
    return shutil.which(name, path=os.pathsep.join(folder for folder in folders if folder))


def vtune_launcher_problem(launcher: Sequence[str]) -> Optional[str]:
    """Why ``launcher`` cannot run vtune per rank, or None.

    deepspeed would put ``--local_rank=N`` right after ``vtune``, unless given
    ``--no_local_rank``. vtune needs ``--no-python`` under torchrun; the deprecated
    ``torch.distributed.launch`` refuses it without ``--use-env`` (it would
    otherwise pass ``--local-rank`` to the program), and adding ``--use-env``
    for the user would change what their script is given.
    """
    found = script_launcher_at(launcher)
    if found is not None and found[0] == "deepspeed" and NO_LOCAL_RANK not in launcher[found[1]:]:
        return ("deepspeed gives the program it runs --local_rank=N as its first argument, which vtune would "
                f"take for its own; add {NO_LOCAL_RANK} (the script then reads its local rank from LOCAL_RANK)")
    at = torchrun_at(launcher)
    if at is None or launcher[at - 1] != "torch.distributed.launch":
        return None
    if any(word in ("--use-env", "--use_env") for word in launcher[at:]):
        return None
    return ("torch.distributed.launch runs only Python scripts unless given --use-env (the script then reads its "
            "local rank from LOCAL_RANK, not --local-rank); add --use-env, or use torchrun")


#: ``--trace-limit``'s default, 2G: a process's trace file stops growing there (its statistics do not).
DEFAULT_TRACE_LIMIT = 2 << 30
#: ``--sample-rate``'s default: samples per second of each thread's CPU time (1 ms of CPU a sample); the
#: collector's own default (``instrumenter/collector/formats.py``).
DEFAULT_SAMPLE_HZ = formats.SAMPLE_HZ_DEFAULT
#: The highest rate asked for: above it the signal handler's cost would be a sizeable share of the CPU. The
#: collector takes no more either.
MAX_SAMPLE_HZ = formats.SAMPLE_HZ_MAX
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


def _auto_window() -> "StepWindow":
    from .builtin.step_window import AUTO

    return AUTO


@dataclass(frozen=True)
class BuiltinOptions:
    """How the built-in collector runs, and what its reading keeps (the VTune backend has its own)."""

    #: which steps trace.json keeps every task of (``--trace-steps``, parsed with the options)
    trace_steps: "StepWindow" = field(default_factory=_auto_window)
    #: bytes a process's trace file may take (``--trace-limit``), None: no limit
    trace_limit: Optional[int] = DEFAULT_TRACE_LIMIT
    #: CPU-time samples per second of each thread (``--sample-rate``), 0: no sampling
    sample_hz: int = DEFAULT_SAMPLE_HZ


@dataclass(frozen=True)
class VTuneOptions:
    """How VTune runs (the built-in backend has its own). ``given``: the flags of these the user typed, named
    in the note that says they are ignored when another backend runs."""

    analyses: Tuple[str, ...] = tuple(ANALYSES)
    sampling_mode: str = "sw"
    data_limit_mb: int = DEFAULT_DATA_LIMIT_MB
    extra_args: Tuple[str, ...] = ()
    given: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileOptions:
    """Everything ``autoitt profile`` was asked, before SCRIPT and its arguments: what every backend uses,
    then each backend's own group (``builtin``, ``vtune``), read by that backend alone.

    ``json_output``: the summary goes to stdout as JSON, so the script's own
    output goes to stderr.
    """

    mode: "Mode"
    backend: str = "auto"
    result_dir: Optional[Path] = None
    #: A launcher the run goes through, e.g. ``("mpirun", "-n", "4")``: one process (one vtune) per rank.
    launcher: Tuple[str, ...] = ()
    json_output: bool = False
    builtin: BuiltinOptions = field(default_factory=BuiltinOptions)
    vtune: VTuneOptions = field(default_factory=VTuneOptions)
