"""PyTorch's operators recorded in a sample of the steps (``--torch-ops sampled``), not in every step.

Under ``torch.autograd.profiler.emit_itt()`` every operator is an ITT task, and
PyTorch's own per-operator path (RecordFunction, its ITT wrapper) costs what
it costs whatever the collector does: on a loop of small operators (an MLP at
small batch, an optimizer over many tensors) about a fifth of the step
(benchmarks/README.md, ``bench_small_ops.py``). A copy made with
``--torch-ops sampled`` therefore does not wrap its training regions in
``emit_itt``; its ``itt`` (:class:`~instrumenter.runtime.collection.Collection`)
enters ``emit_itt`` for the iterations :class:`OperatorSampling` picks, of the
iteration tasks the copy names (its step and eval loops', and a library's
``step``/``eval``), and leaves it when that iteration's task ends. Entering and
leaving cost about 2 µs together in a loop that does nothing else; in a real
step, a recorded step and the slower steps after it cost over half a step to a
step in all (see :data:`DEFAULT_EVERY`), and a step that records nothing pays
for a count and a compare.

Which iterations: per task name and per process, iteration ``i`` (1-based, in
the order they begin on any thread) is recorded when it lies in one of the
``ranges`` (the ranges of ``--trace-steps``, so trace.json's window has its
operators), or ``i % every == 0`` up to iteration ``until``, or
``i % later_every == 0`` past it: a short run keeps a dozen recorded steps
past its warm-up, a long one pays for few. The reader applies the same rule
(:meth:`OperatorSampling.recorded`) to the iterations the trace holds, to take
phases from the recorded steps and to scale the operator table.

Imported by instrumented copies (through collection): the standard library
only; torch is taken from ``sys.modules`` (the script imported it), never
imported here.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from .compiled import tell as tell_compiles
from .guest import programs

#: ``--torch-ops``: every operator of training (``emit_itt`` around each training region), those of a sample
#: of the iterations, or none.
TORCH_OPS = ("all", "sampled", "off")
#: The environment variable ``autoitt profile`` hands the policy down in (:meth:`OperatorSampling.environment`).
VARIABLE = "AUTOITT_TORCH_OPS"
#: Every how many iterations operators are recorded past the ranges, up to iteration :data:`DEFAULT_UNTIL`, and
#: every how many past it: chosen from the measured cost (benchmarks/README.md, ``bench_step_parts.py``). A
#: recorded step, with entering and leaving ``emit_itt``, the closure hook's registration and the slower steps
#: after it (their caches refilled), costs 260-500 µs of the conv sample's 0.45 ms step: one in 20 adds 3-5 % to
#: that stretch, one in 100 about 1 %, one in 500 about 0.2 %. The first stretch keeps a short run's sample: a
#: fit of 24 steps records its step 20 besides steps 2-11 (next to its warm-up), and 200 steps record 10 steady
#: ones; a run of minutes (tens of thousands of steps) still records a hundred or more at one in 500.
DEFAULT_EVERY = 20
DEFAULT_UNTIL = 200
DEFAULT_LATER_EVERY = 500


def with_first(ranges: Tuple[Tuple[int, int], ...]) -> Tuple[Tuple[int, int], ...]:
    """``ranges`` with iteration 1 recorded too: a loop's first iteration is often its slowest (memory
    faulted in, primitives created), and a kind of few iterations (an evaluation of two batches an epoch)
    would otherwise miss a quarter of its time; the reader counts it as it ran, not scaled
    (instrumenter/builtin/statistics/estimates.py)."""
    rest = [r for r in ranges if r[0] > 2]
    joined = [r for r in ranges if r[0] <= 2]
    first = (1, max((last for _, last in joined), default=1))
    return (first,) + tuple(rest)


#: The ranges recorded when none is given: ``--trace-steps auto``'s (its first window: the runtime cannot import
#: ``instrumenter.profile.step_window.AUTO_RANGES``; a test holds them equal), and iteration 1 (:func:`with_first`).
DEFAULT_RANGES: Tuple[Tuple[int, int], ...] = ((1, 11),)


@dataclass(frozen=True)
class OperatorSampling:
    """Which iterations record PyTorch's operators: those in ``ranges`` (1-based, inclusive), every
    ``every``-th up to iteration ``until`` and every ``later_every``-th past it (both 1: all of them)."""

    every: int = DEFAULT_EVERY
    ranges: Tuple[Tuple[int, int], ...] = DEFAULT_RANGES
    until: int = DEFAULT_UNTIL
    later_every: int = DEFAULT_LATER_EVERY

    def __post_init__(self) -> None:
        if self.every < 1 or self.later_every < 1 or self.until < 0:
            raise ValueError("every and later_every must be >= 1, until >= 0")

    @classmethod
    def every_iteration(cls) -> "OperatorSampling":
        """The rule that records them all (``--trace-steps all``)."""
        return cls(every=1, ranges=(), until=0, later_every=1)

    @classmethod
    def one_in(cls, every: int, ranges: Tuple[Tuple[int, int], ...] = ()) -> "OperatorSampling":
        """Every ``every``-th iteration throughout, and ``ranges``."""
        return cls(every=every, ranges=ranges, until=0, later_every=every)

    def recorded(self, iteration):
        """Whether iteration ``iteration`` (1-based) of an iteration task records its operators: for an int (the
        runtime, at every step) a bool, for a numpy array of them (the reader) an array of bools. Written with
        ``|`` and ``&``, which mean the same for both, so the rule is written once."""
        # two comparisons, not ``~``: on a bool (the runtime's int) it is the int's bitwise inversion
        early, late = iteration <= self.until, iteration > self.until
        picked = ((iteration % self.every == 0) & early) | ((iteration % self.later_every == 0) & late)
        for first, last in self.ranges:
            picked = picked | ((iteration >= first) & (iteration <= last))
        return picked

    def _multiples(self, iterations: int) -> int:
        """How many of iterations 1..``iterations`` the moduli pick (ranges aside)."""
        early = min(iterations, self.until)
        later = iterations // self.later_every - self.until // self.later_every if iterations > self.until else 0
        return early // self.every + later

    def count(self, iterations: int) -> int:
        """How many of iterations 1..``iterations`` record their operators (no loop over them)."""
        merged: List[Tuple[int, int]] = []
        for first, last in sorted(self.ranges):
            last = min(last, iterations)
            if first > last:
                continue
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        inside = sum(last - first + 1 for first, last in merged)
        multiples_inside = sum(self._multiples(last) - self._multiples(first - 1) for first, last in merged)
        return inside + self._multiples(iterations) - multiples_inside

    def describe(self) -> str:
        """``every 20th iteration to 200 and every 500th after, and iterations 2-11``: for the summary."""
        if self.every == self.later_every == 1:
            return "every iteration"
        if self.every == self.later_every:
            rule = f"every {self.every}th iteration"
        else:
            rule = f"every {self.every}th iteration to {self.until} and every {self.later_every}th after"
        ranges = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in self.ranges)
        return rule + (f", and iterations {ranges}" if ranges else "")

    # -- handed down to the run -----------------------------------------------------------------

    def environment(self) -> Dict[str, str]:
        """The variable that gives a run this policy (read by :meth:`from_environment` in the copy)."""
        ranges = ",".join(f"{a}-{b}" for a, b in self.ranges)
        return {VARIABLE: f"every={self.every};until={self.until};later={self.later_every};ranges={ranges}"}

    @classmethod
    def from_environment(cls, environ: Optional[Dict[str, str]] = None) -> "OperatorSampling":
        """The policy ``autoitt profile`` set, else the default one (a copy run by hand); a value that does
        not parse is the default too: a copy must run whatever its environment holds."""
        text = (os.environ if environ is None else environ).get(VARIABLE, "")
        if not text:
            return cls()
        try:
            fields = dict(part.split("=", 1) for part in text.split(";"))
            ranges = tuple(tuple(int(n) for n in r.split("-", 1)) for r in fields.get("ranges", "").split(",") if r)
            every = int(fields["every"])
            return cls(every=every, ranges=ranges, until=int(fields.get("until", 0)),  # type: ignore[arg-type]
                       later_every=int(fields.get("later", every)))
        except (ValueError, KeyError, TypeError):
            return cls()

    def to_json(self) -> dict:
        return {"every": self.every, "ranges": [list(r) for r in self.ranges], "until": self.until,
                "later_every": self.later_every}

    @classmethod
    def from_json(cls, data: dict) -> "OperatorSampling":
        """As :meth:`to_json` wrote it; a record from before ``until`` (one modulus throughout) reads as it ran."""
        every = int(data["every"])
        return cls(every=every, ranges=tuple((int(a), int(b)) for a, b in data.get("ranges", ())),
                   until=int(data.get("until", 0)), later_every=int(data.get("later_every", every)))


class _Entered:
    """``emit_itt`` entered by an iteration on this thread, and how many tasks are open inside it."""

    __slots__ = ("context", "inside")

    def __init__(self, context: Any) -> None:
        self.context = context
        self.inside = 0


class Moduli(NamedTuple):
    """What turns most iterations down without asking the rule: iteration ``n`` records nothing when
    ``n % (every if n <= until else later)`` and ``n > ranges_end`` (each call a step makes costs microseconds,
    see instrumenter/runtime/markers.c, which reads these once)."""

    every: int
    until: int
    later: int
    ranges_end: int


class OperatorToggle:
    """Enters ``emit_itt`` for the iterations of ``iterations`` (task names) the policy picks, and leaves it
    when that task ends; one per process (every copy's ``itt`` shares it), counting per task name.

    The copies' markers (``instrumenter.runtime._markers``, C) count each iteration in ``_counters`` and call
    :meth:`begin_numbered` and :meth:`end` only where they may matter: for an iteration :attr:`fast_reject` does
    not turn down, and while :attr:`entered_threads` is not zero. So a step that records nothing (most of them)
    runs no Python of autoitt's. Each thread keeps only what it entered and how many tasks are open inside it,
    so the ``task_end`` that closes that iteration leaves ``emit_itt``, whatever is nested inside. Each name's
    count is an ``itertools.count``, whose ``next`` the GIL makes atomic across threads. Nothing here may fail
    the script: where PyTorch's profiler already runs on the thread (the script's own, or an outer
    iteration's), the iteration is not toggled; an error from PyTorch is swallowed.
    """

    def __init__(self, sampling: OperatorSampling) -> None:
        self.sampling = sampling
        self.fast_reject = Moduli(sampling.every, sampling.until, sampling.later_every,
                                  max((last for _, last in sampling.ranges), default=0))
        #: threads inside an iteration recording its operators now (changed under ``_lock``)
        self.entered_threads = 0
        #: the optimizer closure hook's handle while some thread records (instrumenter/runtime/closures.py)
        self._closure_hook: Any = None
        self._counters: Dict[str, Iterator[int]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def forked(self) -> None:
        """In a forked child: it counts its own iterations from zero, as the reader counts each process's; only
        the forking thread runs in the child, so only its recording iteration, if any, is still entered."""
        self._counters = {name: itertools.count(1) for name in self._counters}
        self._lock = threading.Lock()
        self.entered_threads = int(getattr(self._local, "entered", None) is not None)
        if not self.entered_threads and self._closure_hook is not None:  # another thread's, gone in the child
            _remove(self._closure_hook)
            self._closure_hook = None

    def add(self, names: Iterable[str]) -> None:
        """Also sample the iterations of task ``names``."""
        with self._lock:
            self._counters = {**{name: itertools.count(1) for name in names}, **self._counters}

    def begin_numbered(self, name: str, number: int) -> None:
        """A task ``name`` began on this thread, its iteration ``number`` counted (0: not an iteration sampled)."""
        entered = getattr(self._local, "entered", None)
        if entered is not None:  # inside an iteration recording its operators already
            entered.inside += 1
            return
        if not number or not self.sampling.recorded(number):
            return
        torch = sys.modules.get("torch")
        if torch is None:
            return
        try:
            if torch.autograd._profiler_enabled():
                return  # the script's own profiler (or emit_itt) runs here: entering would raise
            context = torch.autograd.profiler.emit_itt()
            context.__enter__()
        except Exception as error:  # a guest in the script's process: a torch that cannot, records no operators
            if programs(error):
                raise
            return
        self._local.entered = _Entered(context)
        with self._lock:
            self.entered_threads += 1
            if self.entered_threads == 1:  # optimizers' closures marked while some iteration records
                from .closures import register

                self._closure_hook = register()

    def end(self) -> None:
        """This thread's innermost open task ended."""
        entered = getattr(self._local, "entered", None)
        if entered is None:
            return
        if entered.inside:
            entered.inside -= 1
            return
        self._local.entered = None
        with self._lock:
            self.entered_threads -= 1
            hook = None
            if not self.entered_threads:
                hook, self._closure_hook = self._closure_hook, None
        if hook is not None:
            _remove(hook)
        try:
            entered.context.__exit__(None, None, None)
        except Exception as error:
            if programs(error):
                raise
        tell_compiles()  # a compile happens in a region's first iteration, which records: its graphs get names


def _remove(hook: Any) -> None:
    try:
        hook.remove()
    except Exception as error:  # a guest: a hook torch could not take back is left, guarded (wraps only if profiling)
        if programs(error):
            raise


_toggle: Optional[OperatorToggle] = None
_toggle_lock = threading.Lock()


def toggle() -> OperatorToggle:
    """The process's one toggle, with the policy its environment gives (made on first use)."""
    global _toggle
    if _toggle is None:
        with _toggle_lock:
            if _toggle is None:
                _toggle = OperatorToggle(OperatorSampling.from_environment())
                os.register_at_fork(after_in_child=_toggle.forked)
    return _toggle
