"""Part of autoitt's VTune stand-in (tests only; see ../vtune): a small user-mode sampler of Python functions.

The stand-in puts this folder first on the target's PYTHONPATH and names an
output folder in ``AUTOITT_STANDIN_SAMPLES``; every Python process of the
target then samples its main thread's innermost Python frame every
``AUTOITT_STANDIN_INTERVAL`` seconds and writes the counts to
``<folder>/<pid>.json`` at exit. The stand-in turns them into its
``hotspots -group-by function`` report. Nothing here is VTune's.
"""

import atexit
import json
import os
import sys
import threading

_OUTPUT = os.environ.get("AUTOITT_STANDIN_SAMPLES")

if _OUTPUT:
    _interval = float(os.environ.get("AUTOITT_STANDIN_INTERVAL", "0.002"))
    _counts = {}
    _main = threading.main_thread().ident
    _stop = threading.Event()

    def _sample():
        while not _stop.wait(_interval):
            frame = sys._current_frames().get(_main)
            if frame is None:
                continue
            code = frame.f_code
            key = (code.co_name, getattr(code, "co_qualname", code.co_name), code.co_filename, code.co_firstlineno)
            _counts[key] = _counts.get(key, 0) + 1

    def _write():
        _stop.set()
        os.makedirs(_OUTPUT, exist_ok=True)
        with open(os.path.join(_OUTPUT, f"{os.getpid()}.json"), "w") as handle:
            json.dump({"interval_s": _interval, "samples": [[*key, n] for key, n in _counts.items()]}, handle)

    threading.Thread(target=_sample, daemon=True, name="autoitt-standin-sampler").start()
    atexit.register(_write)


def _the_next_sitecustomize():
    """The sitecustomize this one stands in front of (autoitt's, which makes the target run the copy), as a tool
    that puts its own first on PYTHONPATH must: found on sys.path after this folder."""
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    at = [i for i, p in enumerate(sys.path) if os.path.abspath(p or ".") == here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path[at[0] + 1:] if at else [])
    if spec is not None and spec.loader is not None:
        module = type(sys)("sitecustomize")
        module.__file__, module.__spec__, module.__loader__ = spec.origin, spec, spec.loader
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_the_next_sitecustomize()
