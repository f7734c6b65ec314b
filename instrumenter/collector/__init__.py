"""autoitt's built-in ITT collector: where it is, and how to attach it to a program.

The collector (the ``*.c`` files here, compiled by the package build into
``instrumenter/collector/_collector*.so``) is a shared library that Intel's ITT static
parts load when ``INTEL_LIBITTNOTIFY64`` names it: the one in the ``ittapi``
module, the one in ``libtorch_cpu.so`` (``emit_itt``), the one in TensorFlow's
oneDNN.  It writes one binary trace per process, ``itt-<pid>.bin``, which
:mod:`instrumenter.builtin.trace.tracefile` reads (its docstring documents the format).

The variables must be in the target's environment when it starts: torch
creates its ``PyTorch`` domain when it is imported, and with no collector
named then, every torch task is dropped.

    env = {**os.environ, **environment(Path("traces"), start_paused=True)}
    subprocess.run([sys.executable, "train_itt.py"], env=env)

Import-light (standard library only): the library is found, never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict, Optional, Sequence

__all__ = ["CollectorMissing", "library_path", "environment"]

_MODULE = "instrumenter.collector._collector"


class CollectorMissing(RuntimeError):
    """The collector library was not built with the package."""


def library_path() -> Path:
    """The collector's shared library, to put in ``INTEL_LIBITTNOTIFY64``."""
    try:
        spec = importlib.util.find_spec(_MODULE)
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    if not origin or not Path(origin).is_file():
        raise CollectorMissing(
            "autoitt's ITT collector library (instrumenter/collector/_collector*.so) is missing: it is "
            "compiled from instrumenter/collector/*.c when autoitt is installed, which "
            "needs a C compiler (gcc) and the Python development headers. Install them "
            "(Debian/Ubuntu: apt-get install gcc python3-dev) and reinstall autoitt "
            "(pip install . or pip install -e .)."
        )
    return Path(origin).resolve()


def environment(trace_dir: Path, start_paused: bool, trace_limit: Optional[int] = None, sample_hz: Optional[int] = None,
                own_domains: Sequence[str] = ()) -> Dict[str, str]:
    """The variables to add to a target's environment so it records into trace_dir.

    ``start_paused`` is VTune's ``-start-paused``: tasks are dropped until the
    target's first ``itt.resume()``. ``trace_limit``: the bytes each process's
    file may take; past them the collector counts instead of recording (the
    trace format's "The trace limit"). ``sample_hz``: CPU-time samples per second of each thread
    (``samples-<pid>.bin``; 0: none; None: the collector's default, ``formats.SAMPLE_HZ_DEFAULT``); ``own_domains``: the domains of autoitt's markers, whose tasks (steps,
    epochs, evaluations) a sample is attributed to, and inherited by threads with none of their own.
    """
    variables = {
        "INTEL_LIBITTNOTIFY64": str(library_path()),
        "AUTOITT_TRACE_DIR": str(Path(trace_dir).resolve()),
        "AUTOITT_START_PAUSED": "1" if start_paused else "0",
        "AUTOITT_TRACE_LIMIT": str(trace_limit or 0),
        "AUTOITT_OWN_DOMAINS": ",".join(own_domains),
    }
    if sample_hz is not None:
        variables["AUTOITT_SAMPLE_HZ"] = str(max(int(sample_hz), 0))
    return variables
