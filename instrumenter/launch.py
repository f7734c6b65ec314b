"""Run an instrumented copy as if it were the original script.

``python -m instrumenter.launch COPY ORIGINAL [ARGS...]`` executes COPY's code
as ``__main__`` with ``__file__``, ``sys.argv[0]`` and ``sys.path[0]`` of
ORIGINAL, in the caller's working directory, so sibling imports and paths
relative to the script resolve exactly as they would for ORIGINAL. Tracebacks
name COPY's lines (the code that really ran). The exit code is the script's:
an uncaught exception exits 1 with its traceback, ``sys.exit(n)`` exits n.

When ``AUTOITT_EXIT_DIR`` is set, the launcher also writes that exit code to
``$AUTOITT_EXIT_DIR/<pid>``: a profiler that runs the script (VTune) returns
its own exit code, and this file is how autoitt tells a failing script from a
failing profiler, per process (one file per MPI rank).

When ``AUTOITT_MODULES`` names a JSON file mapping module files of the
user's project to instrumented copies, an import hook runs the copies in
their place: the module keeps its name, ``__file__`` and package, only its
code is the copy's. Nothing is written to the user's folder (no bytecode is
cached for these modules, so a later plain run cannot pick up markers).

Stdlib only: this module runs inside the user's training process.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types

MODULES_VARIABLE = "AUTOITT_MODULES"


class _CopyLoader(importlib.abc.Loader):
    """Executes an instrumented copy as the module it was made from."""

    def __init__(self, copy: str) -> None:
        self.copy = copy

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        with open(self.copy, "rb") as handle:
            code = compile(handle.read(), self.copy, "exec", dont_inherit=True)
        exec(code, module.__dict__)


class _CopyFinder(importlib.abc.MetaPathFinder):
    """Finds modules as usual, then swaps in the loader of their instrumented copy."""

    def __init__(self, copies: dict) -> None:
        self.copies = {os.path.realpath(original): copy for original, copy in copies.items()}

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not spec.origin:
            return spec
        copy = self.copies.get(os.path.realpath(spec.origin))
        if copy is None:
            return spec
        spec.loader = _CopyLoader(copy)
        spec.cached = None
        spec.has_location = True
        return spec


def install_copies(mapping_file: str) -> None:
    with open(mapping_file) as handle:
        sys.meta_path.insert(0, _CopyFinder(json.load(handle)))


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


EXIT_DIR_VARIABLE = "AUTOITT_EXIT_DIR"


def _exit_status(code) -> int:
    """The status the process will exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    return code % 256 if isinstance(code, int) else 1


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m instrumenter.launch COPY ORIGINAL [ARGS...]")
    # Popped, so the script's environment (and its children's) is as without autoitt.
    exit_dir = os.environ.pop(EXIT_DIR_VARIABLE, None)
    mapping = os.environ.pop(MODULES_VARIABLE, None)
    if mapping:
        install_copies(mapping)
    if not exit_dir:
        run(sys.argv[1], sys.argv[2], sys.argv[3:])
        return
    status = 1  # an uncaught exception
    try:
        run(sys.argv[1], sys.argv[2], sys.argv[3:])
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
        raise
    except KeyboardInterrupt:
        status = 130  # what a shell reports for a run stopped by SIGINT
        raise
    finally:
        try:
            os.makedirs(exit_dir, exist_ok=True)
            with open(os.path.join(exit_dir, str(os.getpid())), "w") as handle:
                handle.write(f"{status}\n")
        except OSError:
            pass  # never turn the script's own outcome into a launcher error


if __name__ == "__main__":
    main()
