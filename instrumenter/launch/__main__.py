"""Runs an instrumented copy as ``python SCRIPT ARGS`` runs the original: the program sees only its own frames.

autoitt's command is ``python [FLAGS] <results>/<stem>.autoitt.pyc ARGS``
(:func:`instrumenter.launch.command`), with ``site/`` first on ``PYTHONPATH``
and variables naming the run's ``instrumentation.json``, that ``.pyc`` and the
script as the user named it (:func:`instrumenter.launch.environment`). No
launcher script is in it: Python imports ``site/sitecustomize.py`` before it
opens the main file, and in the main process that loads this module (without
``sys.modules``: nothing the script could import) and calls :func:`enter_main`,
which

* compiles the copy under the original's file name, with the original's line
  numbers (and columns): tracebacks, warnings and ``inspect`` show the user's
  file, lines and source, never the copy's. A *prologue* goes first in the
  module's code (after its docstring and ``__future__`` imports), with no line
  number of its own, so a tracer sees the same line events as for the original;
* writes that code as the ``.pyc`` Python is about to run (atomically: every
  rank writes the same bytes);
* installs the import hook that runs the instrumented copy of each local module
  in place of the original (Python's own ``SourceFileLoader`` with the copy's
  code: the module keeps its name, ``__file__``, ``__cached__`` and package,
  import frames are left out of tracebacks as Python leaves them out, and no
  bytecode is written), and provides the package ``_autoitt`` the copies import
  autoitt's runtime from (``from _autoitt.collection import Collection``):
  autoitt's own modules under a name no package of the user's can shadow;
* puts the prologue's function in ``sys.modules`` as ``_autoitt_main``. The
  prologue pops it and calls it, in the module's own frame, before the script's
  first instruction: it makes ``__main__.__file__``, ``__loader__``,
  ``sys.argv[0]``, the script's entry of ``sys.orig_argv`` and ``sys.path[0]``
  what ``python SCRIPT`` gives (Python set them for the ``.pyc``). Nothing of
  autoitt's stays on the stack, in ``sys.modules`` or in the hooks.

When ``AUTOITT_EXIT_DIR`` is set (VTune), the script's body is also the body
of a ``with`` on what the prologue returns: its ``__exit__`` sees how the script
ended and writes the exit code to ``$AUTOITT_EXIT_DIR/<pid>`` (a profiler that
runs the script returns its own exit code: this file is how autoitt tells a
failing script from a failing profiler, per process). Without it, no wrapper.

An uncaught error raised by autoitt's own code (:func:`_autoitt_fault`) is said
to be autoitt's once Python has printed it (an ``atexit`` callback reads
``sys.last_value``: ``sys.excepthook`` stays Python's), and noted in
:data:`FAULT_FILE` beside ``instrumentation.json`` for the summary.

If the ``.pyc`` runs without the sitecustomize (``-E``, ``-I`` or ``-S`` in a
launcher's interpreter flags, or a launcher that does not pass ``PYTHONPATH``
on), the prologue finds no ``_autoitt_main`` and exits saying so.

Stdlib only: this module runs inside the user's training process.
"""

# Only what the launcher cannot do without is imported before the script runs (and ast only to
# compile): a module imported here is the standard library's for the script too, even where
# the script's folder has one of that name (under `python script.py`, only what Python itself
# loads at start-up is). sys.path[0] is not the script's folder yet when they are imported.
import builtins
import importlib.machinery
import json
import os
import re
import sys
import types

EXIT_DIR_VARIABLE = "AUTOITT_EXIT_DIR"
#: The .pyc Python runs as the main file (absolute): the process whose main file it is, is the main process.
MAIN_VARIABLE = "AUTOITT_MAIN"
#: The script as the user named it: sys.argv[0] (and __file__ made absolute), as under ``python SCRIPT``.
SCRIPT_VARIABLE = "AUTOITT_MAIN_SCRIPT"
#: Set by run_copy_instead: a process of the run that started the script again, whose .pyc is already written.
AGAIN_VARIABLE = "AUTOITT_MAIN_AGAIN"
#: The name the prologue pops from sys.modules and calls (see _prologue).
PROLOGUE_MODULE = "_autoitt_main"
#: What the prologue says when it runs without the sitecustomize having prepared it.
NO_SITECUSTOMIZE = ("autoitt: this instrumented copy ran without autoitt's sitecustomize (python -E, -I or -S, or a "
                    "launcher that does not pass PYTHONPATH and the AUTOITT_ variables on to the script's process); "
                    "run the script's processes without those flags")
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


def _compile(copy_path: str, filename: str, lines: "_Lines | None", main: "str | None" = None):
    """The copy's code object, named ``filename``; with ``lines``, at the original's positions. ``main``:
    the main script's, with the prologue (``"prologue"``) or the prologue as a ``with`` around the body
    (``"with"``): see :func:`_prologue`."""
    with open(copy_path, "rb") as handle:
        data = handle.read()
    if lines is None and main is None:
        return compile(data, filename, "exec", dont_inherit=True)
    import ast

    tree = ast.parse(data, filename)
    if main is not None:
        _prologue(tree, ast, around=main == "with")
    if lines is None:
        return compile(tree, filename, "exec", dont_inherit=True)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) is None or getattr(node, "lineno", None) < 0:
            continue  # the prologue: no line
        if getattr(node, "end_lineno", None) is None:
            continue
        start = (lines.line(node.lineno), lines.column(node.lineno, node.col_offset, end=False))
        end = (lines.line(node.end_lineno), lines.column(node.end_lineno, node.end_col_offset, end=True))
        if end < start:  # a statement ending on a marker shown at its region's first line
            end = start
        (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset) = start, end
    return compile(tree, filename, "exec", dont_inherit=True)


def _prologue(tree, ast, around: bool) -> None:
    """Put ``(sys.modules.pop('_autoitt_main', None) or sys.exit(NO_SITECUSTOMIZE))()`` first in the module
    (after its docstring, which stays ``__doc__``, and its ``__future__`` imports, which must come first); with
    ``around``, as ``with <that>:`` around the rest of the body. Its nodes have no line (-1): no "line" event for
    a tracer or coverage, no line in any traceback; the body keeps its own lines and columns. Inside a ``with``
    the module's names, ``global`` and annotations are the module's as before (a ``with`` is no scope)."""
    body, at = tree.body, 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        at = 1
    while at < len(body) and isinstance(body[at], ast.ImportFrom) and body[at].module == "__future__":
        at += 1
    call = ast.parse(f"(__import__('sys').modules.pop({PROLOGUE_MODULE!r}, None) or "
                     f"__import__('sys').exit({NO_SITECUSTOMIZE!r}))()").body[0]
    for node in ast.walk(call):
        if hasattr(node, "lineno"):
            node.lineno = node.end_lineno = node.col_offset = node.end_col_offset = -1
    if around and body[at:]:
        call = ast.With(items=[ast.withitem(context_expr=call.value, optional_vars=None)], body=body[at:],
                        type_comment=None, lineno=-1, end_lineno=-1, col_offset=-1, end_col_offset=-1)
    tree.body = body[:at] + [call] + ([] if isinstance(call, ast.With) else body[at:])


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


class _CopyLoader(importlib.machinery.SourceFileLoader):
    """A local module's loader: Python's own ``SourceFileLoader`` whose code is the copy's, compiled under the
    original's name and lines. Python's ``exec_module`` runs it, so an error raised while the module is imported
    shows the frames Python shows for any import (importlib's are left out), and the module is left with a plain
    ``SourceFileLoader`` as ``__loader__``. ``get_code`` is this loader's: no bytecode is read or written, so a
    later plain run cannot pick up markers; ``__cached__`` is what Python names."""

    def __init__(self, name, path, copy, instrumentation) -> None:
        super().__init__(name, path)
        self.copy, self.instrumentation = copy, instrumentation

    def get_code(self, fullname):
        module = sys.modules.get(fullname)
        if module is not None and getattr(module, "__loader__", None) is self:
            plain = importlib.machinery.SourceFileLoader(fullname, self.path)
            module.__loader__ = plain
            if getattr(module, "__spec__", None) is not None and module.__spec__.loader is self:
                module.__spec__.loader = plain
        return _compile(self.copy, self.path, self.instrumentation.lines_of(self.path, self.copy))


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
        if copy is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _CopyLoader(name, spec.origin, copy, self.instrumentation)
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
            _report_fault(fault, results)

    sys.excepthook = excepthook


def _install(instrumentation: _Instrumentation) -> None:
    """Everything the copies need in a multiprocessing child, before any of the script's code runs."""
    _hide_launcher_frames(os.path.dirname(os.path.abspath(instrumentation.path)))
    _install_copies(instrumentation)


def _install_copies(instrumentation: _Instrumentation) -> None:
    """The import hook for the local modules' copies, and the runtime package."""
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


def main_file(instrumentation_path: str, entry: str) -> str:
    """The .pyc the main process runs: ``<stem>.autoitt.pyc`` beside instrumentation.json (as
    ``instrumenter.launch.main_file`` names it; a test holds them equal)."""
    stem = os.path.splitext(os.path.basename(entry))[0]
    return os.path.join(os.path.dirname(os.path.abspath(instrumentation_path)), f"{stem}.autoitt.pyc")


def run_copy_instead(path: str) -> None:
    """In a Python process of the profiled run whose main script is the profiled script (a restart wrapper
    exec'd it, or the script ran itself): this process becomes one that runs the copy, as autoitt started the
    first one: ``python [its flags] <stem>.autoitt.pyc ARGS``. By exec, in sitecustomize, before any of the script
    runs: the same process (pid, parent, environment) with the same interpreter options (``-u``, ``-X dev``,
    ...), its own steps in the run's results. The .pyc is the one the run's first process wrote (it is not written
    again: a rank of the run may be about to read it). A script whose entry has no copy runs as it is."""
    instrumentation = _Instrumentation(path)
    if instrumentation.entry["runs"] is None:
        return
    pyc = main_file(instrumentation.path, instrumentation.entry["path"])
    os.environ.update({MAIN_VARIABLE: pyc, SCRIPT_VARIABLE: sys.argv[0], AGAIN_VARIABLE: "1"})
    options = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]
    os.execv(sys.executable, [sys.executable, *options, pyc, *sys.argv[1:]])


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


# -- the main process ---------------------------------------------------------------------------------------------

def enter_main(pyc: str, path: str) -> None:
    """In the process whose main file is ``pyc`` (called by sitecustomize, before Python opens it): write the
    copy's code there, install what the copies need, and leave the prologue its function (see the docstring)."""
    environ = os.environ
    # Popped (from the C environment too): the script's children are not the main process. The instrumentation
    # and entry variables and PYTHONPATH stay, for the children that run copies (see site/sitecustomize.py).
    script = environ.pop(SCRIPT_VARIABLE, None) or sys.argv[0]
    environ.pop(MAIN_VARIABLE, None)
    again = environ.pop(AGAIN_VARIABLE, None)
    exit_dir = environ.pop(EXIT_DIR_VARIABLE, None)
    _sample_from_the_start()
    instrumentation = _Instrumentation(path)
    # As Python names the main file: the working directory joined to the path as typed, not normalized.
    filename = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    program = instrumentation.program_of(filename)
    if not (again and os.path.isfile(pyc)):
        copy = instrumentation.entry["runs"] or program or filename
        try:
            code = _compile(copy, program or filename, instrumentation.lines_of(filename, copy),
                            main="with" if exit_dir else "prologue")
        except SyntaxError as error:  # as Python shows a script that does not compile: no traceback, exit 1
            sys.excepthook(type(error), error.with_traceback(None), None)
            _write_status(exit_dir, 1)
            sys.stderr.flush()
            os._exit(1)
        _write_pyc(pyc, code)
    _install_copies(instrumentation)
    import atexit

    atexit.register(_fault_at_exit, os.path.dirname(instrumentation.path))
    sys.modules[PROLOGUE_MODULE] = _Main(PROLOGUE_MODULE, script, filename, pyc, exit_dir)


class _Main(types.ModuleType):
    """What the prologue pops from ``sys.modules`` and calls (a module, for whatever walks ``sys.modules`` in the
    meantime: the user's own sitecustomize, say); under ``with``, also the context manager around the body."""

    def __init__(self, name: str, script: str, filename: str, pyc: str, exit_dir: "str | None") -> None:
        super().__init__(name)
        self._script, self._filename, self._pyc, self._exit_dir = script, filename, pyc, exit_dir

    def __call__(self) -> "_Main":
        """What Python set up for the .pyc, made what it sets up for ``python SCRIPT``."""
        main = sys.modules["__main__"]
        main.__file__ = self._filename
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", self._filename)
        sys.argv[0] = self._script
        at = len(sys.orig_argv) - len(sys.argv)
        if 0 < at < len(sys.orig_argv):
            sys.orig_argv[at] = self._script
        # sys.path[0]: the folder of the main file's real path, unless -P (3.11) left it out.
        if (not getattr(sys.flags, "safe_path", False) and sys.path
                and sys.path[0] == os.path.dirname(os.path.realpath(self._pyc))):
            sys.path[0] = os.path.dirname(os.path.realpath(self._filename))
        site = sys.modules.get("sitecustomize")
        if getattr(site, "_autoitt_alone", False):
            del sys.modules["sitecustomize"]  # there was none but autoitt's: `import sitecustomize` fails, as it would
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> None:
        """How the script ended, written for the profiler's run (only under ``with``: ``AUTOITT_EXIT_DIR``)."""
        if value is None:
            status = 0
        elif isinstance(value, SystemExit):
            status = _exit_status(value.code)
        elif isinstance(value, KeyboardInterrupt):
            status = 130  # what a shell reports for a run stopped by SIGINT
        else:
            status = 1  # an uncaught exception
        _write_status(self._exit_dir, status)
        # None: the exception goes on, as if there were no `with`


def _exit_status(code) -> int:
    """The status the process will exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    return code % 256 if isinstance(code, int) else 1


def _write_pyc(path: str, code) -> None:
    """``code`` as the .pyc at ``path``, written whole or not at all: every rank writes the same bytes, and Python
    reads the file once it is in place. Python does not check a main .pyc's flags, date and size (12 bytes)."""
    import marshal
    from importlib.util import MAGIC_NUMBER

    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as handle:
        handle.write(MAGIC_NUMBER + bytes(12) + marshal.dumps(code))
    os.replace(temporary, path)


def _write_status(exit_dir: "str | None", status: int) -> None:
    if not exit_dir:
        return
    try:
        os.makedirs(exit_dir, exist_ok=True)
        with open(os.path.join(exit_dir, str(os.getpid())), "w") as handle:
            handle.write(f"{status}\n")
    except OSError:
        pass  # never turn the script's own outcome into a launcher error


def _fault_at_exit(results: str) -> None:
    """At exit, after Python printed an uncaught exception (``sys.last_value``, set for any but ``SystemExit``):
    if it was autoitt's, say so under it and note it in :data:`FAULT_FILE` for the summary."""
    fault = _autoitt_fault(getattr(sys, "last_value", None))
    if fault is not None:
        _report_fault(fault, results)


def _report_fault(fault: str, results: "str | None") -> None:
    sys.stderr.write(f"autoitt: this error was raised by autoitt's instrumentation, not by your script "
                     f"({fault}); it is a bug in autoitt: python {os.path.basename(sys.argv[0])} runs "
                     "your script without it\n")
    try:
        with open(os.path.join(results, FAULT_FILE), "a") as handle:
            handle.write(f"{os.getpid()}: {fault}\n")
    except (OSError, TypeError):
        pass  # never turn the script's outcome into another error
