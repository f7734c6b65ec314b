"""Run an instrumented copy as if it were the original script.

``python -m instrumenter.launch COPY ORIGINAL [ARGS...]`` executes COPY's code
as ``__main__`` with ``__file__``, ``sys.argv[0]`` and ``sys.path[0]`` of
ORIGINAL, in the caller's working directory, so sibling imports and paths
relative to the script resolve exactly as they would for ORIGINAL. Tracebacks
name COPY's lines (the code that really ran). The exit code is the script's:
an uncaught exception exits 1 with its traceback, ``sys.exit(n)`` exits n.

Stdlib only: this module runs inside the user's training process.
"""

from __future__ import annotations

import builtins
import os
import sys
import types


def run(copy: str, original: str, args: list) -> None:
    with open(copy, "rb") as handle:
        code = compile(handle.read(), copy, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    # As for `python train.py`: __file__ and sys.path[0] absolute, argv[0] as typed.
    main.__file__ = os.path.abspath(original)
    main.__builtins__ = builtins
    main.__spec__ = None
    main.__loader__ = None
    sys.modules["__main__"] = main
    sys.argv[:] = [original, *args]
    sys.path[0] = os.path.dirname(main.__file__)
    exec(code, main.__dict__)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m instrumenter.launch COPY ORIGINAL [ARGS...]")
    run(sys.argv[1], sys.argv[2], sys.argv[3:])


if __name__ == "__main__":
    main()
