"""The launchers a profiled run may go through (``--launcher``): finding one, and the command each runs per rank.

``mpirun``, ``srun`` and the like start any program; torchrun, ``accelerate launch`` and ``deepspeed`` start a
Python script with an interpreter of their own unless told not to (:func:`under_launcher`), and deepspeed gives
the script ``--local_rank=N``. Both backends run their command through :func:`under_launcher`; the VTune
backend asks :func:`vtune_launcher_problem` first.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple


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
