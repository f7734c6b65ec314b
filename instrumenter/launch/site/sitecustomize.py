"""Python imports this at the start of every Python process of a profiled run: autoitt puts this folder first on
PYTHONPATH (see ``instrumenter.launch.environment``), and the script's children inherit it.

* The main process (its main file is the copy's ``.pyc``, ``$AUTOITT_MAIN``): Python imports this before it
  opens that file, and the launcher's ``enter_main`` writes the copy's code there and prepares the prologue that
  makes the program's ``__main__``, ``sys.argv`` and ``sys.path`` those of ``python SCRIPT`` (see
  ``../__main__.py``). No frame of autoitt's is left under the script's.
* A multiprocessing child (``spawn``, ``forkserver``: a fresh interpreter that imports the script again): the
  launcher's ``enter_child`` makes it run the instrumented copies too, and sample from its start.
* A Python process whose main script is the profiled script (a restart wrapper's ``os.execv``, the script running
  itself with ``subprocess``): it becomes one that runs the copy (``python FLAGS PYC ARGS``), by exec.
* Any other process (another script the profiled one runs with ``subprocess``, say) is left as it is.

In every one, this folder is taken off ``sys.path`` (it holds nothing to import), and the ``sitecustomize`` this
one stands in front of, if there is one, runs next, as it would have; if there is none, ``sitecustomize`` leaves
``sys.modules`` before the script's first line, as without autoitt (see ``_Main`` in the launcher).

Standard library only: this runs inside the user's processes. The launcher is loaded without ``sys.modules``:
nothing the script could import.
"""


def _after_this_folder() -> list:
    """The entries of sys.path after this folder's: where the sitecustomize this one stands in front of is (a
    tool that put its own in front of autoitt's, and runs the next one as this one does, is not run twice)."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    at = [i for i, p in enumerate(sys.path) if os.path.abspath(p or ".") == here]
    return sys.path[at[0] + 1:] if at else list(sys.path)


_AFTER = _after_this_folder()


def _autoitt() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path_importer_cache.pop(here, None)
    environ = os.environ
    path = environ.get("AUTOITT_INSTRUMENTATION")
    if not path:
        return
    # sys.orig_argv (3.10+): for `python -c CODE`, sys.argv holds only "-c".
    argv, argv0 = sys.orig_argv, (sys.argv[0] if sys.argv else "")
    script = argv0 not in ("", "-", "-c", "-m")  # a main file, not -c, -m or stdin
    child = "--multiprocessing-fork" in argv or any("from multiprocessing." in arg for arg in argv)
    main = environ.get("AUTOITT_MAIN")
    is_main = bool(script and main and os.path.realpath(argv0) == os.path.realpath(main))
    # The profiled script started again (`os.execv(sys.executable, [sys.executable] + sys.argv)`): sys.argv[0] is
    # its path as typed, relative to the working directory.
    again = (not child and not is_main and script
             and os.path.realpath(argv0) == environ.get("AUTOITT_ENTRY"))
    if not (is_main or child or again):
        return
    import importlib.machinery

    loader = importlib.machinery.SourceFileLoader("_autoitt_launcher", os.path.join(os.path.dirname(here),
                                                                                     "__main__.py"))
    launcher = type(sys)(loader.name)  # not in sys.modules: nothing the script could import
    launcher.__file__ = loader.path
    loader.exec_module(launcher)
    if is_main:
        # the .pyc as Python will open it: the working directory joined to the path as typed
        launcher.enter_main(argv0 if os.path.isabs(argv0) else os.path.join(os.getcwd(), argv0), path)
    elif again:
        launcher.run_copy_instead(path)  # an exec: nothing after it runs, unless there is no copy to run
    else:
        launcher.enter_child(path)


def _the_next_sitecustomize() -> None:
    """The sitecustomize that was there before autoitt put this folder first, if any, in this module's place."""
    import importlib.machinery
    import os
    import sys

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _AFTER)
    module = sys.modules[__name__]
    for name in ("_autoitt", "_the_next_sitecustomize", "_after_this_folder", "_AFTER"):
        module.__dict__.pop(name, None)
    if spec is None or spec.loader is None:
        module._autoitt_alone = True  # taken out of sys.modules before the script's first line, in the main process
        return
    module.__file__, module.__spec__, module.__loader__ = spec.origin, spec, spec.loader
    module.__cached__ = spec.cached
    spec.loader.exec_module(module)


try:
    _autoitt()
finally:
    _the_next_sitecustomize()
