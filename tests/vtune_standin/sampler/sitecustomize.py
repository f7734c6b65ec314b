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
