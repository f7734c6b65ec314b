"""How autoitt starts a copy: the launcher's command line (the launcher itself is ``__main__.py`` here).

The launcher runs inside the user's process and is started by this folder's
path (see its docstring for why), so it is written against the standard
library alone and its constants are defined there, once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Sequence

from .__main__ import EXIT_DIR_VARIABLE, INSTRUMENTATION_OPTION

__all__ = ["EXIT_DIR_VARIABLE", "command"]


def command(copy: Path, script: Path, args: Sequence[str], instrumentation: Optional[Path] = None,
            python: str = sys.executable) -> List[str]:
    """The target command: the same interpreter, running ``copy`` as ``script`` with ``args``.

    ``instrumentation``: the run's ``instrumentation.json``, for the original
    lines in tracebacks and the copies of local modules.
    """
    option = [INSTRUMENTATION_OPTION, str(instrumentation.resolve())] if instrumentation is not None else []
    return [python, str(Path(__file__).resolve().parent), *option, str(copy), str(script), *args]
