"""How autoitt starts a copy: the command line and the environment of its main process.

The command is ``python <result folder>/<stem>.autoitt.pyc ARGS``: no launcher
script in it, so the program sees only its own frames. Python imports
``site/sitecustomize.py`` (first on ``PYTHONPATH``) before it opens that file;
in the main process it has the launcher (``__main__.py`` here) write the copy's
code there and make ``__main__``, ``sys.argv`` and ``sys.path`` what ``python
SCRIPT ARGS`` gives before the script's first line (see its docstring).

The launcher runs inside the user's process with the standard library alone, so
it cannot import this package: the names below are written in both files, and a
test holds them equal.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

#: Where the launcher writes the script's exit code, one file per process (see ``__main__.py``).
EXIT_DIR_VARIABLE = "AUTOITT_EXIT_DIR"
#: Beside ``instrumentation.json``: the launcher's line per process whose uncaught error was autoitt's own.
FAULT_FILE = "autoitt-error.txt"
#: The run's ``instrumentation.json``, for every process of the run (the sitecustomize acts only where it is set).
INSTRUMENTATION_VARIABLE = "AUTOITT_INSTRUMENTATION"
#: The profiled script's real path: a process of the run that starts it again runs its copy.
ENTRY_VARIABLE = "AUTOITT_ENTRY"
#: The .pyc the main process runs; popped by the launcher there.
MAIN_VARIABLE = "AUTOITT_MAIN"
#: The script as the user named it (``sys.argv[0]``); popped by the launcher in the main process.
SCRIPT_VARIABLE = "AUTOITT_MAIN_SCRIPT"
#: Set by the launcher in a process of the run that started the script again (its .pyc is written already).
AGAIN_VARIABLE = "AUTOITT_MAIN_AGAIN"
#: First on PYTHONPATH: its ``sitecustomize.py`` runs in every Python process of the run.
SITE_DIR = Path(__file__).resolve().with_name("site")
#: The launcher's files the program's processes read by path, never import (so no import of autoitt's fails first
#: where one is missing): the sitecustomize, the launcher it loads, and what that loads.
RUN_TIME_FILES = (SITE_DIR / "sitecustomize.py", SITE_DIR.with_name("__main__.py"), SITE_DIR.with_name("copies.py"))

__all__ = ["AGAIN_VARIABLE", "ENTRY_VARIABLE", "EXIT_DIR_VARIABLE", "FAULT_FILE", "INSTRUMENTATION_VARIABLE", "MAIN_VARIABLE",
           "RUN_TIME_FILES", "SCRIPT_VARIABLE", "SITE_DIR", "command", "environment", "main_file",
           "missing_run_time_file", "write_placeholder"]

#: What the placeholder .pyc says (the launcher's NO_SITECUSTOMIZE, which a test holds equal).
NO_SITECUSTOMIZE = ("autoitt: this instrumented copy ran without autoitt's sitecustomize (python -E, -I or -S, or a "
                    "launcher that does not pass PYTHONPATH and the AUTOITT_ variables on to the script's process); "
                    "run the script's processes without those flags")
#: Why an install cannot profile where one of :data:`RUN_TIME_FILES` is missing (a wheel built without its data files).
INCOMPLETE_INSTALL = ("this file of autoitt's is missing, and every process of the profiled program runs it: "
                      "autoitt's installation is incomplete; reinstall autoitt (pip install --force-reinstall "
                      "autoitt, or the wheel or sdist you installed it from, rebuilt from this release)")


def missing_run_time_file() -> Optional[Path]:
    """The first of :data:`RUN_TIME_FILES` this install lacks (see :data:`INCOMPLETE_INSTALL`), or None."""
    return next((path for path in RUN_TIME_FILES if not path.is_file()), None)


def main_file(instrumentation: Path, script: Path) -> Path:
    """The .pyc the main process runs: ``<stem>.autoitt.pyc`` beside ``instrumentation.json``."""
    return Path(os.path.abspath(instrumentation)).with_name(f"{Path(script).stem}.autoitt.pyc")


def command(script: Path, args: Sequence[str], instrumentation: Path, python: str = sys.executable) -> List[str]:
    """The target command: the same interpreter, running the script's .pyc with ``args`` (run it with
    :func:`environment`)."""
    return [python, str(main_file(instrumentation, script)), *args]


def environment(base: Mapping[str, str], script: Path, instrumentation: Path) -> Dict[str, str]:
    """``base`` with what the command needs: the site folder first on PYTHONPATH, and the variables naming the
    run's instrumentation.json, the .pyc and the script (as the user named it: its ``sys.argv[0]``)."""
    env = dict(base)
    site = str(SITE_DIR)
    paths = env.get("PYTHONPATH")
    if not paths or paths.split(os.pathsep)[0] != site:  # a run inside a profiled run has it already
        env["PYTHONPATH"] = site + (os.pathsep + paths if paths else "")
    env[INSTRUMENTATION_VARIABLE] = os.path.abspath(instrumentation)
    env[ENTRY_VARIABLE] = os.path.realpath(script)
    env[MAIN_VARIABLE] = str(main_file(instrumentation, script))
    env[SCRIPT_VARIABLE] = str(script)
    env.pop(AGAIN_VARIABLE, None)  # a run inside a profiled run is a first run of its own
    return env


def write_placeholder(instrumentation: Path, script: Path) -> Path:
    """Write the .pyc as it is before the main process writes the copy's code there: a program that exits 1
    saying autoitt's sitecustomize did not run (rather than ``can't open file``), and why: the flags or launcher
    that kept it out, or an install that lacks it. Returns its path."""
    path = main_file(instrumentation, script)
    site = RUN_TIME_FILES[0]
    why = f"({NO_SITECUSTOMIZE!r} if __import__('os').path.isfile({str(site)!r}) else " \
          f"{f'autoitt: {site}: {INCOMPLETE_INSTALL}'!r})"
    code = compile(f"__import__('sys').exit{why}", str(script), "exec", dont_inherit=True)
    path.write_bytes(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))
    return path
