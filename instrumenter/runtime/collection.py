"""What ``itt`` is in an instrumented copy: ``ittapi.compat``, made safe for real training runs.

The copy's markers stay the recipe's calls (``itt.resume()``,
``itt.task_begin(_autoitt_domain, "step")``, ...); its header binds ``itt`` to a
:class:`Collection` around ``ittapi.compat``, which changes these:

* collection resumes when the first training region of the process starts and
  pauses when the last one ends, counted over every thread, generator and
  coroutine: one that finishes does not stop the collection of another still
  training (a pause is global: VTune's and autoitt's collector alike);
* an optimizer's closure becomes a task (:mod:`instrumenter.runtime.closures`), so the
  phases tell the forward and backward it runs from the optimizer's update;
* with ``operators_in`` (a copy made with ``--torch-ops sampled``), PyTorch's
  operators are recorded in a sample of those iterations only
  (:mod:`instrumenter.runtime.torch_ops`);
* a task name's ITT string handle is made once. ``ittapi.compat.task_begin``
  makes one per call and never gives its memory back: about 31 bytes a call,
  600 MB over 20 M steps;
* ``task_begin``/``task_end`` are C (``markers.c``): no frame of autoitt's on
  the stack, no bytecode of its own run at a step that records nothing.

Every copy in a process (an entry script and the local modules it imports)
shares one count and one set of handles. Imported by instrumented copies, so
it imports nothing but the standard library and ittapi (which the copy
imports anyway), and only when first used.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, Optional

from .closures import install as install_closures
from .compiled import tell as tell_compiles
from .extensions import load

_lock = threading.Lock()
#: training regions running now, in every thread of the process
_regions = 0
#: task name -> its ITT string handle (the markers keep it)
_handles: Dict[str, Any] = {}
#: window.py's markers (no operator toggle), made at its first task
_plain: Any = None


def markers(toggle: Any = None) -> Any:
    """The markers (``instrumenter.runtime._markers.Markers``, C: ``markers.c``) over ``ittapi.native`` and the
    process's one set of string handles; ``toggle``: the :class:`~instrumenter.runtime.torch_ops.OperatorToggle`
    they count iterations for.

    Every step runs their ``task_begin`` and ``task_end``, after a step's worth of the framework's own code has
    left them out of the CPU's caches: as Python, the pair and the toggle cost about 4 µs a step on the conv
    sample (benchmarks/bench_step_parts.py), and a Ctrl-C could land inside them, its traceback showing
    autoitt's line under the user's. In C they run no bytecode of autoitt's."""
    import ittapi.native

    return load("_markers").Markers(ittapi.native, _handles, toggle)


def task_begin(domain: Any, name: str) -> None:
    """``__itt_task_begin`` on ``domain`` with the one string handle of ``name`` (window.py's tasks)."""
    global _plain
    if _plain is None:
        _plain = markers()
    _plain.task_begin(domain, name)


class Collection:
    """``ittapi.compat`` with collection counted across the process's regions, and string handles made once;
    ``operators_in``: the iteration tasks whose sampled iterations record PyTorch's operators.

    ``task_begin(domain, name)`` and ``task_end(domain)`` are the C markers' (:func:`markers`), set on the
    instance: the copy's ``itt.task_begin(...)`` is a call into C, with no Python frame of autoitt's."""

    def __init__(self, itt: Any, operators_in: Iterable[str] = ()) -> None:
        self._itt = itt
        self._operators = None
        if operators_in:
            from .torch_ops import toggle

            self._operators = toggle()
            self._operators.add(operators_in)
        marks = markers(self._operators)
        self.task_begin = marks.task_begin
        self.task_end = marks.task_end

    def resume(self) -> None:
        """A training region starts: collection resumes if it is the only one running."""
        global _regions
        if self._operators is None:  # else the toggle hooks closures in the iterations that record operators
            install_closures()
        with _lock:
            _regions += 1
            if _regions == 1:
                self._itt.resume()

    def pause(self) -> None:
        """A training region ends: collection pauses if no other one is running."""
        global _regions
        with _lock:
            if _regions == 0:
                return  # a pause the copy did not pair with a resume: nothing of autoitt's to stop
            _regions -= 1
            if _regions == 0:
                tell_compiles()  # before the pause: a copy recording every operator has no other moment
                self._itt.pause()

    def domain_create(self, name: Optional[str] = None) -> Any:
        return self._itt.domain_create(name)

    def pt_region_create(self, name: str) -> Any:
        return self._itt.pt_region_create(name)

    def pt_region_begin(self, region: Any) -> None:
        self._itt.pt_region_begin(region)

    def pt_region_end(self, region: Any) -> None:
        self._itt.pt_region_end(region)

    def detach(self) -> None:
        self._itt.detach()

    def library(self, receiver: Any, method: str, domain: Any, role: Optional[str] = None):
        """The context a library call runs in: its epochs, steps and evals become tasks on ``domain``
        (see :mod:`instrumenter.runtime.libraries`); ``role`` (``train``/``eval``) where ``method`` does not say it."""
        from .libraries import attach

        return attach(self, receiver, method, domain, role)
