"""What ``itt`` is in an instrumented copy: ``ittapi.compat``, made safe for real training runs.

The copy's markers stay the recipe's calls (``itt.resume()``,
``itt.task_begin(_autoitt_domain, "step")``, ...); its header binds ``itt`` to a
:class:`Collection` around ``ittapi.compat``, which changes two things:

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
  600 MB over 20 M steps.

Every copy in a process (an entry script and the local modules it imports)
shares one count and one set of handles. Imported by instrumented copies, so
it imports nothing but the standard library and ittapi (which the copy
imports anyway), and only when first used.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, Optional

from .closures import install as install_closures

_lock = threading.Lock()
#: training regions running now, in every thread of the process
_regions = 0
#: task name -> its ITT string handle
_handles: Dict[str, Any] = {}


#: ``ittapi.native``, imported at the first task: its functions are looked up on it at each call, so that a
#: test (or a profiler) may wrap them
_native: Any = None


def _first_native() -> Any:
    global _native
    import ittapi.native

    _native = ittapi.native
    return _native


def task_begin(domain: Any, name: str) -> None:
    """``__itt_task_begin`` on ``domain`` with the one string handle of ``name``.

    Every step runs this and :meth:`Collection.task_end`, after a step's worth of the framework's own code has
    left them out of the CPU's caches: each Python call and lookup here costs far more than it does in a loop
    (about 5 µs a step for the pair on the conv sample, benchmarks/bench_step_parts.py), so they are kept few.
    """
    native = _native or _first_native()
    handle = _handles.get(name)
    if handle is None:
        with _lock:
            handle = _handles.setdefault(name, native.StringHandle(name))
    native.task_begin(domain, handle)


class Collection:
    """``ittapi.compat`` with collection counted across the process's regions, and string handles made once;
    ``operators_in``: the iteration tasks whose sampled iterations record PyTorch's operators."""

    def __init__(self, itt: Any, operators_in: Iterable[str] = ()) -> None:
        self._itt = itt
        self._operators = None
        if operators_in:
            from .torch_ops import toggle

            self._operators = toggle()
            self._operators.add(operators_in)

    def resume(self) -> None:
        """A training region starts: collection resumes if it is the only one running."""
        global _regions
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
                self._itt.pause()

    def task_begin(self, domain: Any, name: str) -> None:
        task_begin(domain, name)
        operators = self._operators
        if operators is not None:
            operators.begin(name)  # after the task began: the operators are the iteration's children

    def task_end(self, domain: Any) -> None:
        operators = self._operators
        if operators is not None:
            operators.end()
        # ``ittapi.compat.task_end`` is a Python function around this one: a call less per step
        (_native or _first_native()).task_end(domain)

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
