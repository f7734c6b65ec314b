"""Python imports this at the start of every process a profiled script starts (autoitt puts this folder on
the children's PYTHONPATH; see ``enter_child`` in ``../__main__.py``).

In a multiprocessing child (``spawn``, ``forkserver``: a fresh interpreter
that imports the script again) it has the launcher make that child run the
instrumented copies too, and sample from its start. A Python process whose
main script is the profiled script (a restart wrapper's ``os.execv``, the
script running itself with ``subprocess``) becomes the launcher running its
copy, by exec. Any other process (another script the profiled one runs with
``subprocess``, say) is left as it is. Either way, the
``sitecustomize`` this one stands in front of, if there is one, runs next, as
it would have.

Standard library only: this runs inside the user's processes.
"""


def _autoitt() -> None:
    import os
    import sys

    path = os.environ.get("AUTOITT_INSTRUMENTATION")
    # sys.orig_argv (3.10+): for `python -c CODE`, sys.argv holds only "-c".
    argv = sys.orig_argv
    child = "--multiprocessing-fork" in argv or any("from multiprocessing." in arg for arg in argv)
    # The profiled script started again (`os.execv(sys.executable, [sys.executable] + sys.argv)`): a script, not
    # -c, -m or stdin; sys.argv[0] is its path as typed, relative to the working directory.
    again = (not child and sys.argv and sys.argv[0] not in ("", "-", "-c", "-m")
             and os.path.realpath(sys.argv[0]) == os.environ.get("AUTOITT_ENTRY"))
    if not path or not (child or again):
        return
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    loader = importlib.machinery.SourceFileLoader("_autoitt_launcher", os.path.join(os.path.dirname(here),
                                                                                     "__main__.py"))
    import types

    launcher = types.ModuleType(loader.name)  # not in sys.modules: nothing the script could import
    launcher.__file__ = loader.path
    loader.exec_module(launcher)
    if again:
        launcher.run_copy_instead(path)  # an exec: nothing after it runs, unless there is no copy to run
    else:
        launcher.enter_child(path)


def _the_next_sitecustomize() -> None:
    """The sitecustomize that was there before autoitt put this folder first, if any."""
    import importlib.machinery
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = sys.modules[__name__]
        module.__file__ = spec.origin
        spec.loader.exec_module(module)


try:
    _autoitt()
finally:
    _the_next_sitecustomize()
