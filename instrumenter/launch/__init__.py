"""How autoitt starts a copy: the launcher's command line (the launcher itself is ``__main__.py`` here).

The launcher runs inside the user's process, started by its file's path
(see its docstring for why) and with the standard library alone, so it
cannot import this package: the three names below are written in both files,
and a test holds them equal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Sequence

#: Where the launcher writes the script's exit code, one file per process (see ``__main__.py``).
EXIT_DIR_VARIABLE = "AUTOITT_EXIT_DIR"
#: The launcher's option naming the run's ``instrumentation.json``.
INSTRUMENTATION_OPTION = "--instrumentation"
#: Beside ``instrumentation.json``: the launcher's line per process whose uncaught error was autoitt's own.
FAULT_FILE = "autoitt-error.txt"

LAUNCHER = Path(__file__).resolve().with_name("__main__.py")

__all__ = ["EXIT_DIR_VARIABLE", "FAULT_FILE", "INSTRUMENTATION_OPTION", "LAUNCHER", "command"]


def command(copy: Path, script: Path, args: Sequence[str], instrumentation: Optional[Path] = None,
            python: str = sys.executable) -> List[str]:
    """The target command: the same interpreter, running ``copy`` as ``script`` with ``args``.

    ``instrumentation``: the run's ``instrumentation.json``, for the original
    lines in tracebacks and the copies of local modules.
    """
    option = [INSTRUMENTATION_OPTION, str(instrumentation.resolve())] if instrumentation is not None else []
    return [python, str(LAUNCHER), *option, str(copy), str(script), *args]
