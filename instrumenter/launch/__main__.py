"""Run an instrumented copy as if it were the original script.

``python <this file> [--instrumentation FILE] COPY ORIGINAL [ARGS...]``
executes COPY's code as ``__main__`` with ``__file__``, ``sys.argv[0]`` and
``sys.path[0]`` of ORIGINAL, in the caller's working directory, so sibling
imports and paths relative to the script resolve exactly as they would for
``python ORIGINAL ARGS...``. The exit code is the script's: an uncaught
exception exits 1 with its traceback, ``sys.exit(n)`` exits n.

autoitt starts it by its file's path, never as ``python -m
instrumenter.launch``: ``-m`` would put the working directory first on
``sys.path``, where a module of the user's named ``instrumenter`` would be
found instead (and runpy's frames would lead every traceback). Run by path,
``sys.path[0]`` is this folder (it holds nothing else to import) until the
script's folder takes its place, and nothing of autoitt's package is
imported: the user's own ``instrumenter``, ``transforms`` or ``launch``
modules stay importable, as themselves. (``python -m instrumenter.launch``
works too, where nothing shadows it.)

With ``--instrumentation FILE`` (``instrumentation.json``, documented in
:mod:`instrumenter.instrumentation`):

* code is compiled under its original's file name, with the line numbers (and
  columns) of the original: tracebacks, warnings and ``inspect`` show the
  user's file, lines and source, never the copy's. Frames of this launcher are
  left out of the traceback of an uncaught exception;
* an import hook runs the instrumented copy of each local module in place of
  the original: the module keeps its name, ``__file__`` and package, only its
  code is the copy's. No bytecode is cached for these modules, so a later
  plain run cannot pick up markers;
* the copies import autoitt's runtime from the package ``_autoitt``
  (``from _autoitt.collection import Collection``; windowed,
  ``from _autoitt.window import CollectionWindow``), which the launcher
  provides: autoitt's own modules under a name no package of the user's can
  shadow, while the user's own ``instrumenter`` (with its ``collection``) stays
  theirs. Its modules load on the copy's import, never before.

When ``AUTOITT_EXIT_DIR`` is set, the launcher also writes the exit code to
``$AUTOITT_EXIT_DIR/<pid>``: a profiler that runs the script (VTune) returns
its own exit code, and this file is how autoitt tells a failing script from a
failing profiler, per process (one file per MPI rank).

Stdlib only: this module runs inside the user's training process.
"""

# Only what the launcher cannot do without is imported before the script runs (and ast only to
# map lines): a module imported here is the standard library's for the script too, even where
# the script's folder has one of that name (under `python script.py`, only what Python itself
# loads at start-up is).
import builtins
import importlib.machinery
import json
import os
import re
import sys
import types

EXIT_DIR_VARIABLE = "AUTOITT_EXIT_DIR"
INSTRUMENTATION_OPTION = "--instrumentation"
#: The package the copies import autoitt's runtime from (transforms' LAUNCHED_RUNTIME_PACKAGE): autoitt's own
#: ``instrumenter`` folder under a name of autoitt's (see _provide_runtime).
RUNTIME_PACKAGE = "_autoitt"

_NEWLINE = re.compile(rb"\r\n|\r|\n")
_HERE = os.path.dirname(os.path.abspath(__file__))


class _Lines:
    """The ``line_map`` of one copy (see ``transforms.LineMap``), with both files' indentation.

    Maps a position in the copy to the same code in the original: the line,
    and the column less the indentation the rewrite added to that line.
    """

    def __init__(self, line_map: dict, copy: bytes, original: bytes) -> None:
        self.inserted = {int(c): int(o) for c, o in line_map["inserted"]}
        self.copy_indent = [_indent(line) for line in _NEWLINE.split(copy)]
        self.original_lines = _NEWLINE.split(original)
        self.lines = [0]  # copy line -> original line: an inserted one's own, else the next of the original
        shown = 0
        for number in range(1, int(line_map["copy_lines"]) + 1):
            if number in self.inserted:
                self.lines.append(self.inserted[number])
            else:
                shown += 1
                self.lines.append(shown)

    def line(self, copy_line: int) -> int:
        return self.lines[copy_line] if copy_line < len(self.lines) else copy_line

    def column(self, copy_line: int, column: int, end: bool) -> int:
        line = self.line(copy_line)
        original = self.original_lines[line - 1] if line <= len(self.original_lines) else b""
        if copy_line in self.inserted:  # autoitt's own line: the whole original line it is shown as
            return len(original) if end else _indent(original)
        shift = self.copy_indent[copy_line - 1] - _indent(original) if copy_line <= len(self.copy_indent) else 0
        return max(column - shift, 0)


def _indent(line: bytes) -> int:
    return len(line) - len(line.lstrip(b" \t\f"))


def _compile(copy_path: str, filename: str, lines: "_Lines | None"):
    """The copy's code object, named ``filename``; with ``lines``, at the original's positions."""
    with open(copy_path, "rb") as handle:
        data = handle.read()
    if lines is None:
        return compile(data, filename, "exec", dont_inherit=True)
    import ast

    tree = ast.parse(data, filename)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) is None or getattr(node, "end_lineno", None) is None:
            continue
        start = (lines.line(node.lineno), lines.column(node.lineno, node.col_offset, end=False))
        end = (lines.line(node.end_lineno), lines.column(node.end_lineno, node.end_col_offset, end=True))
        if end < start:  # a statement ending on a marker shown at its region's first line
            end = start
        (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset) = start, end
    return compile(tree, filename, "exec", dont_inherit=True)


class _Instrumentation:
    """What ``instrumentation.json`` says about each file: which copy runs for it, and its line map."""

    def __init__(self, path: str) -> None:
        with open(path) as handle:
            data = json.load(handle)
        self.path = os.path.abspath(path)
        self.files = {os.path.realpath(f["path"]): f for f in data["files"]}
        self.entry = data["files"][0]

    def lines_of(self, original: str, copy: str) -> "_Lines | None":
        record = self.files.get(os.path.realpath(original))
        if record is None or record["runs"] is None or not record["line_map"]["inserted"]:
            return None
        # A notebook's lines are those of its code cells' program, written beside the copy.
        with open(copy, "rb") as handle, open(record.get("program") or original, "rb") as source:
            return _Lines(record["line_map"], handle.read(), source.read())

    def program_of(self, original: str) -> "str | None":
        """A notebook's program (its code cells as Python): its code is compiled under that name, so tracebacks
        show the program's lines, never the notebook's JSON."""
        return self.files.get(os.path.realpath(original), {}).get("program")

    def copies(self) -> dict:
        """original -> copy, for the local modules that run from copies."""
        return {path: f["runs"] for path, f in list(self.files.items())[1:] if f["runs"] is not None}


class _CopyLoader:
    """Executes an instrumented copy as the module it was made from (a loader: ``create_module``, ``exec_module``)."""

    def __init__(self, copy: str, instrumentation: _Instrumentation) -> None:
        self.copy = copy
        self.instrumentation = instrumentation

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        original = module.__spec__.origin
        code = _compile(self.copy, original, self.instrumentation.lines_of(original, self.copy))
        exec(code, module.__dict__)


class _CopyFinder:
    """Finds modules as usual, then swaps in the loader of their instrumented copy (a meta path finder)."""

    def __init__(self, instrumentation: _Instrumentation) -> None:
        self.instrumentation = instrumentation
        self.copies = instrumentation.copies()

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not spec.origin:
            return spec
        copy = self.copies.get(os.path.realpath(spec.origin))
        if copy is None:
            return spec
        spec.loader = _CopyLoader(copy, self.instrumentation)
        spec.cached = None
        spec.has_location = True
        return spec

    def invalidate_caches(self) -> None:
        pass


def _provide_runtime() -> None:
    """autoitt's runtime as the package :data:`RUNTIME_PACKAGE`: a package module whose path is autoitt's own
    ``instrumenter`` folder, so ``_autoitt.collection`` is that folder's ``collection.py``, imported when a copy
    imports it (and its relative imports, ``.libraries``, stay inside ``_autoitt``). Neither the
    ``instrumenter`` package nor its ``__init__`` is imported: a package of the user's of that name stays
    theirs, and nothing of autoitt's runs before the copy asks for it."""
    folder = os.path.dirname(_HERE)
    spec = importlib.machinery.ModuleSpec(RUNTIME_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [folder]
    package = types.ModuleType(RUNTIME_PACKAGE, "autoitt's runtime, imported by the instrumented copies")
    package.__spec__, package.__path__, package.__package__ = spec, [folder], RUNTIME_PACKAGE
    sys.modules[RUNTIME_PACKAGE] = package


def _is_launcher(filename: str) -> bool:
    """A frame of this launcher, of runpy (``python -m``) or of the import machinery it calls."""
    runpy = sys.modules.get("runpy")
    return (os.path.dirname(os.path.abspath(filename)) == _HERE
            or filename == "<frozen runpy>" or filename == getattr(runpy, "__file__", None)
            or filename.startswith("<frozen importlib._bootstrap"))


def _outside_launcher(tb):
    """``tb`` without the frames of this launcher (see :func:`_is_launcher`)."""
    frames = []
    while tb is not None:
        if not _is_launcher(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    result = None
    for frame in reversed(frames):
        result = types.TracebackType(result, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return result


#: Written beside instrumentation.json when an uncaught exception was autoitt's (see _autoitt_fault): one line a
#: process, so that the summary never blames the script for it.
FAULT_FILE = "autoitt-error.txt"


def _autoitt_fault(value) -> "str | None":
    """How an uncaught exception is autoitt's rather than the script's, or None: raised in autoitt's own code
    (its runtime, this launcher compiling a copy, ittapi) or a name of the markers that is not defined. Only
    errors (an ``Exception``): Ctrl-C and ``sys.exit`` land wherever the program happens to be."""
    if not isinstance(value, Exception):
        return None
    name = getattr(value, "name", None) if isinstance(value, NameError) else None
    if name and (name == "itt" or name.startswith("_autoitt")):
        return f"{type(value).__name__}: {value}"
    last, tb = None, value.__traceback__
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return None
    filename = os.path.abspath(last.tb_frame.f_code.co_filename)
    ittapi = sys.modules.get("ittapi")
    ours = [os.path.dirname(_HERE)] + ([os.path.dirname(ittapi.__file__)] if getattr(ittapi, "__file__", None) else [])
    if any(filename.startswith(folder + os.sep) for folder in ours):
        return f"{type(value).__name__}: {value} (raised at {filename}:{last.tb_lineno})"
    return None


def _hide_launcher_frames(results: "str | None" = None) -> None:
    """Show every uncaught exception as Python would for the original script: without this launcher's frames.

    Done in ``sys.excepthook``, so Python's own handling stays: exit code 1,
    and for Ctrl-C the end by SIGINT after finalization (which writes what the
    collector buffered). A hook the script installs replaces this one.
    An exception that is autoitt's (:func:`_autoitt_fault`) is said to be so
    under its traceback, and noted in ``results``/:data:`FAULT_FILE` for the summary.
    """
    original = sys.excepthook

    def excepthook(kind, value, tb):
        fault = _autoitt_fault(value)
        # Python shows an exception's own __traceback__ (and its causes'), not the one passed here.
        seen, pending = set(), [value]
        while pending:
            current = pending.pop()
            if current is None or id(current) in seen:
                continue
            seen.add(id(current))
            current.__traceback__ = _outside_launcher(current.__traceback__)
            pending.extend((current.__cause__, current.__context__))
        original(kind, value, value.__traceback__)
        if fault is not None:
            sys.stderr.write(f"autoitt: this error was raised by autoitt's instrumentation, not by your script "
                             f"({fault}); it is a bug in autoitt: python {os.path.basename(sys.argv[0])} runs "
                             "your script without it\n")
            try:
                with open(os.path.join(results, FAULT_FILE), "a") as handle:
                    handle.write(f"{os.getpid()}: {fault}\n")
            except (OSError, TypeError):
                pass  # never turn the script's outcome into another error

    sys.excepthook = excepthook


def run(copy: str, original: str, args: list, instrumentation: "_Instrumentation | None" = None) -> None:
    main = types.ModuleType("__main__")
    # As for `python train.py`: __file__ and sys.path[0] absolute, argv[0] as typed.
    main.__file__ = os.path.abspath(original)
    main.__builtins__ = builtins
    main.__spec__ = None
    main.__loader__ = None
    lines = instrumentation.lines_of(original, copy) if instrumentation is not None else None
    filename = (instrumentation.program_of(original) or main.__file__) if instrumentation is not None else copy
    code = _compile(copy, filename, lines)
    sys.modules["__main__"] = main
    sys.argv[:] = [original, *args]
    # In place of this folder (run by path) or of the working directory (-m): the script's own.
    sys.path[0] = os.path.dirname(main.__file__)
    exec(code, main.__dict__)


def _exit_status(code) -> int:
    """The status the process will exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    return code % 256 if isinstance(code, int) else 1


def _install(instrumentation: _Instrumentation) -> None:
    """Everything the copies need in this process, before any of the script's code runs."""
    _hide_launcher_frames(os.path.dirname(os.path.abspath(instrumentation.path)))
    if instrumentation.copies():
        sys.meta_path.insert(0, _CopyFinder(instrumentation))
    _provide_runtime()


# -- processes the script starts ------------------------------------------------------------------

#: Names the run's instrumentation.json for the script's multiprocessing children (see enter_child).
INSTRUMENTATION_VARIABLE = "AUTOITT_INSTRUMENTATION"
#: The profiled script's real path, for the run's Python processes that start it again (see run_copy_instead).
ENTRY_VARIABLE = "AUTOITT_ENTRY"
#: Put on the children's PYTHONPATH: its sitecustomize.py calls enter_child in each Python child.
SITE_DIR = os.path.join(_HERE, "site")


def _children_run_copies(instrumentation: _Instrumentation) -> None:
    """The script's multiprocessing children (spawn, forkserver: fresh interpreters that import the script
    again), and the run's Python processes that start the script itself again (a restart wrapper's
    ``os.execv``, a script that runs itself with ``subprocess``), run the copies too: they inherit these
    variables, and Python imports SITE_DIR's sitecustomize."""
    os.environ[INSTRUMENTATION_VARIABLE] = instrumentation.path
    os.environ[ENTRY_VARIABLE] = os.path.realpath(instrumentation.entry["path"])
    paths = os.environ.get("PYTHONPATH")
    if not paths or paths.split(os.pathsep)[0] != SITE_DIR:  # a launcher the script exec'd has it already
        os.environ["PYTHONPATH"] = SITE_DIR + (os.pathsep + paths if paths else "")


def run_copy_instead(path: str) -> None:
    """In a Python process of the profiled run whose main script is the profiled script (a restart wrapper
    exec'd it, or the script ran itself): this process becomes the launcher running the copy, as autoitt
    started the first one. By exec, in sitecustomize, before any of the script runs: the same process
    (pid, parent, environment) with the same interpreter options (``-u``, ``-X dev``, ...), its own steps in
    the run's results. A script whose entry has no copy (nothing to instrument) runs as it is."""
    instrumentation = _Instrumentation(path)
    copy = instrumentation.entry["runs"]
    if copy is None:
        return
    options = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]
    os.execv(sys.executable, [sys.executable, *options, os.path.abspath(__file__), INSTRUMENTATION_OPTION,
                              instrumentation.path, copy, *sys.argv])


def enter_child(path: str) -> None:
    """In a multiprocessing child of a profiled script: run copies, as the launcher does for the script.

    The child imports the script again as ``__mp_main__`` (from the original's
    path, which it gets from the parent): multiprocessing's hook for that runs
    the script's copy instead, compiled under the original's name and lines,
    and only then installs the copies of its modules, so the children of
    another script (run by the profiled one) import what they would without
    autoitt.
    """
    import multiprocessing.spawn as spawn

    _sample_from_the_start()  # as for the script: a spawned DataLoader worker makes no ITT call of its own
    instrumentation = _Instrumentation(path)
    entry, copy = os.path.realpath(instrumentation.entry["path"]), instrumentation.entry["runs"]
    original_fixup = spawn._fixup_main_from_path
    installed = []  # a forkserver's children inherit it with the rest of the process

    def fixup_main_from_path(main_path):
        if os.path.realpath(main_path) != entry:
            # The child of another script (one the profiled script ran with subprocess, say): as without autoitt.
            return original_fixup(main_path)
        if not installed:
            _install(instrumentation)
            installed.append(True)
        current = sys.modules["__main__"]
        if copy is None or getattr(current, "__file__", None) == main_path:
            return original_fixup(main_path)
        spawn.old_main_modules.append(current)
        main = types.ModuleType("__mp_main__")
        main.__file__, main.__builtins__ = main_path, builtins
        sys.modules["__main__"] = sys.modules["__mp_main__"] = main
        exec(_compile(copy, main_path, instrumentation.lines_of(main_path, copy)), main.__dict__)

    spawn._fixup_main_from_path = fixup_main_from_path


def _sample_from_the_start() -> None:
    """Starts the built-in collector's sampling now, so that imports and data preparation are sampled too
    (else it starts at the script's first ITT call). Not with VTune's collector, nor with sampling off."""
    library = os.environ.get("INTEL_LIBITTNOTIFY64")
    if not library or os.environ.get("AUTOITT_SAMPLE_HZ", "1000") == "0" or "AUTOITT_TRACE_DIR" not in os.environ:
        return
    try:
        import ctypes

        ctypes.CDLL(library).autoitt_start_sampling()
    except (OSError, AttributeError):
        pass  # another collector: it samples (or not) on its own


def main(argv: list) -> None:
    _sample_from_the_start()
    instrumentation = None
    if argv[:1] == [INSTRUMENTATION_OPTION] and len(argv) > 1:
        instrumentation = _Instrumentation(argv[1])
        argv = argv[2:]
    if len(argv) < 2:
        sys.exit(f"usage: python {__file__} [{INSTRUMENTATION_OPTION} FILE] COPY ORIGINAL [ARGS...]")
    # Popped, so the script's environment (and its children's) is as without autoitt.
    exit_dir = os.environ.pop(EXIT_DIR_VARIABLE, None)
    if instrumentation is not None:
        _install(instrumentation)
        _children_run_copies(instrumentation)
    if not exit_dir:
        run(argv[0], argv[1], argv[2:], instrumentation)
        return
    status = 1  # an uncaught exception
    try:
        run(argv[0], argv[1], argv[2:], instrumentation)
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
    main(sys.argv[1:])
