"""Runs an instrumented copy as ``python SCRIPT ARGS`` runs the original: the program sees only its own frames.

autoitt runs ``python [FLAGS] <results>/<stem>.autoitt.pyc ARGS`` with ``site/`` first on PYTHONPATH and
variables naming instrumentation.json, that .pyc and the script as the user named it (``instrumenter.launch``).
Python imports ``site/sitecustomize.py`` before it opens the main file; in the main process that loads this
module (not into ``sys.modules``) and calls :func:`enter_main`, which compiles the copy under the original's
file name, lines and columns (tracebacks, warnings and ``inspect`` show the user's file and source) with a
*prologue* first (no line of its own: a tracer sees the original's line events), writes it as that .pyc,
installs the import hook that runs the local modules' copies (Python's own ``SourceFileLoader`` with the
copy's code, no bytecode written), provides the package ``_autoitt`` the copies import autoitt's runtime from
(a name no package of the user's can shadow), and puts the prologue's function in ``sys.modules`` as
``_autoitt_main``. The prologue pops and calls it in the script's own frame before its first instruction:
``__main__.__file__``, ``__loader__``, ``sys.argv[0]``, ``sys.orig_argv`` and ``sys.path[0]`` become what
``python SCRIPT`` gives. Nothing of autoitt's stays on the stack, in ``sys.modules`` or in the hooks.

With ``AUTOITT_EXIT_DIR`` (VTune, which returns its own exit code) the body runs inside a ``with`` on what the
prologue returns, whose ``__exit__`` writes the script's exit code to ``$AUTOITT_EXIT_DIR/<pid>``; without it,
no wrapper. An uncaught error raised by autoitt's own code is said to be autoitt's after Python printed it
(an ``atexit`` callback reads ``sys.last_value``; ``sys.excepthook`` stays Python's) and noted in
:data:`FAULT_FILE`. Run without the sitecustomize (``-E``/``-I``/``-S``), the prologue exits saying so.

Stdlib only: this module runs inside the user's training process.
"""

# Only what the launcher cannot do without is imported before the script runs (and ast only to
# compile): a module imported here is the standard library's for the script too, even where
# the script's folder has one of that name (under `python script.py`, only what Python itself
# loads at start-up is). sys.path[0] is not the script's folder yet when they are imported.
import builtins
import importlib.machinery
import os
import sys
import types

EXIT_DIR_VARIABLE = "AUTOITT_EXIT_DIR"
#: The .pyc Python runs as the main file (absolute): the process whose main file it is, is the main process.
MAIN_VARIABLE = "AUTOITT_MAIN"
#: The script as the user named it: sys.argv[0] (and __file__ made absolute), as under ``python SCRIPT``.
SCRIPT_VARIABLE = "AUTOITT_MAIN_SCRIPT"
#: Set by run_copy_instead: a process of the run that started the script again, whose .pyc is already written.
AGAIN_VARIABLE = "AUTOITT_MAIN_AGAIN"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _beside(name: str):
    """The module ``name``.py of this folder, loaded by its path and kept out of ``sys.modules`` (as this one)."""
    loader = importlib.machinery.SourceFileLoader(f"_autoitt_launch_{name}", os.path.join(_HERE, f"{name}.py"))
    module = types.ModuleType(loader.name)
    module.__file__ = loader.path
    loader.exec_module(module)
    return module


_copies = _beside("copies")
_Instrumentation, _compile = _copies._Instrumentation, _copies._compile
PROLOGUE_MODULE, NO_SITECUSTOMIZE, RUNTIME_PACKAGE = (_copies.PROLOGUE_MODULE, _copies.NO_SITECUSTOMIZE,
                                                      _copies.RUNTIME_PACKAGE)


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
    (its runtime, this launcher compiling a copy, ittapi; the C markers mark theirs) or a name of the markers
    that is not defined. Only errors (an ``Exception``): Ctrl-C and ``sys.exit`` land wherever the program
    happens to be."""
    if not isinstance(value, Exception):
        return None
    name = getattr(value, "name", None) if isinstance(value, NameError) else None
    if name and (name == "itt" or name.startswith("_autoitt")):
        return f"{type(value).__name__}: {value}"
    if getattr(value, "_autoitt_marker", False) is True:  # raised in the markers, C: no frame of theirs to see
        return f"{type(value).__name__}: {value} (raised in autoitt's markers, instrumenter/runtime/markers.c)"
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


def _install(instrumentation) -> None:
    """Everything the copies need in a multiprocessing child, before any of the script's code runs."""
    _hide_launcher_frames(os.path.dirname(os.path.abspath(instrumentation.path)))
    _install_copies(instrumentation)


def _install_copies(instrumentation) -> None:
    """The import hook for the local modules' copies, and the runtime package."""
    if instrumentation.copies():
        sys.meta_path.insert(0, _copies._CopyFinder(instrumentation))
    _copies._provide_runtime()


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
    if not library or os.environ.get("AUTOITT_SAMPLE_HZ") == "0" or "AUTOITT_TRACE_DIR" not in os.environ:
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
        try:
            _write_pyc(pyc, code)
        except OSError as error:  # (a full disk): said as it is, not as a copy run without autoitt's set-up
            sys.stderr.write(f"autoitt: cannot write {pyc}, the script's code: {error.strerror or error}\n")
            _write_status(exit_dir, 1)
            sys.stderr.flush()
            os._exit(1)
    _install_copies(instrumentation)
    # Already now, for a sitecustomize of the user's (it runs next): the prologue sets them again, with the rest.
    sys.argv[0] = script
    if 0 < len(sys.orig_argv) - len(sys.argv) < len(sys.orig_argv):
        sys.orig_argv[len(sys.orig_argv) - len(sys.argv)] = script
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
        # The copy's header imports ittapi (ittapi.compat): found here, before the script's folder heads sys.path,
        # so that a script named ittapi.py (or a file of that name beside it) is not imported in its place.
        try:
            import ittapi.compat  # noqa: F401
        except ImportError:
            pass  # the copy's own import says what is missing
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
    """``code`` as the .pyc at ``path``, written whole or not at all: every rank writes the same code, and each
    Python reads a whole file, its own or another rank's. Python does not check a main .pyc's flags, date and size (12 bytes)."""
    import marshal
    from importlib.util import MAGIC_NUMBER

    temporary = f"{path}.{os.uname().nodename}.{os.getpid()}.tmp"  # ranks on other hosts may share the folder
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
