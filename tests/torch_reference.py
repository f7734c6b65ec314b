"""torch.profiler's split of a training run into forward, backward and optimizer: the reference for the phases.

``python tests/torch_reference.py SCRIPT [ARGS...]`` runs SCRIPT under
torch.profiler (CPU) and prints ``{"forward": share, "backward": share,
"optimizer": share}`` (shares of their sum) as JSON on its last line of stderr.
A script that trains in child processes (``mp.spawn``) calls :func:`profiled`
around its training itself. ``python tests/torch_reference.py --timed SCRIPT``
prints the same split from the program's own wall-clock spans instead, with no
profiler in the process (:func:`timed`).

The split uses torch.profiler's own evidence, not autoitt's rules: over every
thread's event tree, ``backward`` is the autograd engine's events (top-most),
``forward`` the top-most operators that carry an autograd sequence number
(recorded with grad on: the model's, never an optimizer's no-grad update),
outside backward; ``optimizer`` is ``Optimizer.step``/``zero_grad`` less the
closures they run, which this module marks with ``record_function("closure")``
through PyTorch's global optimizer step pre-hook. Anything else is descended
into. Time outside these (Python, waits) is in none of them. Each event counts
for at most :data:`CAP` times its name's 90th percentile (a thread descheduled inside
one operator on a busy machine).
"""

from __future__ import annotations

import contextlib
import functools
import json
import runpy
import statistics
import sys
import time
from typing import Dict, Iterator, Optional


def _closure_wrapped(args, kwargs, wrap):
    """An optimizer step pre-hook's result with the step's closure (``step(closure)`` or ``step(closure=...)``)
    replaced by ``wrap(closure)``; None where the step has none."""
    if len(args) > 1 and callable(args[1]):
        return (args[0], wrap(args[1])) + tuple(args[2:]), kwargs
    if callable(kwargs.get("closure")):
        return args, dict(kwargs, closure=wrap(kwargs["closure"]))
    return None


def _mark_closures() -> None:
    from torch.autograd.profiler import record_function
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def marked(fn):
        def closure():
            with record_function("closure"):
                return fn()
        return closure

    def hook(_optimizer, args, kwargs):
        return _closure_wrapped(args, kwargs, marked)

    register_optimizer_step_pre_hook(hook)


#: An event counts for at most this many times its name's usual (:func:`_bound`): on two busy cores a thread can lose
#: its core for milliseconds inside one 20 µs operator (seen here: 8 to 16 ms, 65 to 800 times the median),
#: and torch.profiler's sums would make that operator's phase the run's. A program's own variation stays
#: within it: a first call's work (Adam's state, a primitive's creation), and a Lightning loop's backward
#: that takes three to four times as long in some steps as in others (page faults on its large gradients).
CAP = 10.0


def split(prof, cap: Optional[float] = CAP) -> Dict[str, float]:
    """Forward, backward and optimizer as shares of their sum, from a finished ``torch.profiler.profile``: each
    event's time capped at ``cap`` times its name's usual (:func:`_bound`; None: as it ran)."""
    times: Dict[tuple, list] = {}

    def walk(event) -> None:
        name = event.name
        if name.startswith("autograd::engine::evaluate_function"):
            times.setdefault(("backward", name), []).append(event.cpu_time_total)
        elif name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            closures = [child for child in event.cpu_children if child.name == "closure"]
            times.setdefault(("optimizer", name), []).append(
                event.cpu_time_total - sum(c.cpu_time_total for c in closures))
            for closure in closures:
                walk(closure)
        elif name.startswith("aten::") and event.sequence_nr >= 0:
            times.setdefault(("forward", name), []).append(event.cpu_time_total)
        else:
            for child in event.cpu_children:
                walk(child)

    for event in prof.profiler.function_events:
        if event.cpu_parent is None:
            walk(event)
    totals = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for (phase, _name), values in times.items():
        bound = _bound(values, cap)
        totals[phase] += sum(min(value, bound) for value in values)
    whole = sum(totals.values())
    return {name: value / whole for name, value in totals.items()}


def operator_table(prof, cap: Optional[float] = CAP) -> Dict[str, list]:
    """Per operator (``aten::``, ``autograd::``, a torch.compile graph's ``## Call CompiledFxGraph <hash> ##``),
    its calls and self CPU time (s) over the whole run: what autoitt's operator table is checked against.

    Each call counts for at most ``cap`` times its kind's usual (:func:`_bound`; None: as it ran): on a loaded machine
    (the suite's other worker, the DataLoader's workers) torch.profiler's sum of wall times measures the
    preemptions in it. MNIST's ``threshold_backward`` under two busy loops: calls of 184 µs at the median, 8.4
    ms at the 99th percentile, 201-213 ms in all where a quiet run gives 63-68 (108-114 capped), the same on
    torch's CPU and default builds; autoitt's estimate leaves such disturbed iterations out of its scaling
    (instrumenter/builtin/statistics/disturbed.py). A kind is the operator's name and whether autograd
    recorded it: an evaluation's calls (no grad, 1000-image batches: 15 times a training call) are a kind of
    their own. Within a kind, shapes still differ: the VAE's weight-gradient ``mm`` of 64x400 by 400x784 are
    40 times its 64x20 by 20x400, which outnumber them, and a cap at the median cut the large ones to a
    quarter; Adam's ``sqrt`` of the two 784x400 weights, a fifth of its calls, are 40 times those of the
    8000-element ones (:func:`_bound` caps at the kind's 90th percentile instead). Telling shapes apart by
    ``record_shapes`` would cost more than the cap saves: it slowed the VAE's steps from 6.2 ms to 9-14."""
    calls: Dict[tuple, list] = {}
    for event in prof.profiler.function_events:
        if event.name.startswith(("aten::", "autograd::", "## Call CompiledFxGraph ")):
            calls.setdefault((event.name, _recorded_by_autograd(event)), []).append(event.self_cpu_time_total)
    table: Dict[str, list] = {}
    for (name, _grad), values in calls.items():
        bound = _bound(values, cap)
        row = table.setdefault(name, [0, 0.0])
        row[0] += len(values)
        row[1] += sum(min(value, bound) for value in values) / 1e6
    return table


def _bound(values, cap: Optional[float]) -> float:
    """The most a call of a kind whose calls took ``values`` counts for: ``cap`` times their 90th percentile, so
    that a shape run in a tenth of the calls or more is never cut, and a preempted call (a few in a hundred:
    a 184 µs call loses its core to a busy neighbour's 4 ms slice) is."""
    if cap is None:
        return float("inf")
    return cap * (statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0])


def _recorded_by_autograd(event) -> bool:
    """Whether the call, or one it ran inside, carries an autograd sequence number (run with grad on)."""
    while event is not None:
        if event.sequence_nr >= 0:
            return True
        event = event.cpu_parent
    return False


@contextlib.contextmanager
def operators() -> Iterator[None]:
    """Runs its block under torch.profiler; prints :func:`operator_table` as JSON on stderr at the end."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    print(json.dumps(operator_table(prof)), file=sys.stderr)


class _Clock:
    """Per function: calls and seconds, forward and backward."""

    def __init__(self) -> None:
        self.seen: Dict[str, Dict[str, float]] = {}

    def add(self, name: str, part: str, seconds: float) -> None:
        mine = self.seen.setdefault(name, {"calls": 0, "forward_s": 0.0, "backward_calls": 0, "backward_s": 0.0})
        mine["calls" if part == "forward" else "backward_calls"] += 1
        mine[part + "_s"] += seconds

    def wrapped(self, name: str, fn):
        """``fn`` timed by the clock; its backward too, from the hook on its output's gradient (run by the
        autograd engine right before the function's backward node) to the hook on its input's (right after
        it, before the node that made the input): the backward operator and the engine's few microseconds
        around it."""
        @functools.wraps(fn)
        def clocked_call(tensor, *args, **kwargs):
            start = time.perf_counter()
            out = fn(tensor, *args, **kwargs)
            self.add(name, "forward", time.perf_counter() - start)
            if getattr(out, "requires_grad", False) and getattr(tensor, "requires_grad", False):
                began = []

                def output_grad(grad):
                    began.append(time.perf_counter())

                def input_grad(grad):
                    if began:
                        self.add(name, "backward", time.perf_counter() - began.pop())

                out.register_hook(output_grad)
                tensor.register_hook(input_grad)
            return out
        return clocked_call


def install_clock(names: str) -> None:
    """The ``torch.nn.functional`` functions ``names`` (comma-separated) timed by the clock (:class:`_Clock`)
    from now on; ``{name: {calls, forward_s, backward_calls, backward_s}}`` printed as JSON on stderr at the
    interpreter's exit. A script can call it itself, so that its clock and a profiler see the same run."""
    import atexit

    from torch.nn import functional

    clock = _Clock()
    for name in names.split(","):
        setattr(functional, name, clock.wrapped(name, getattr(functional, name)))
    atexit.register(lambda: print(json.dumps(clock.seen), file=sys.stderr))


@contextlib.contextmanager
def clocked(names: str) -> Iterator[None]:
    """Runs its block with :func:`install_clock`."""
    install_clock(names)
    yield


@contextlib.contextmanager
def profiled(cap: Optional[float] = CAP) -> Iterator[None]:
    """Runs its block under torch.profiler, closures marked; prints the split as JSON on stderr at the end."""
    from torch.profiler import ProfilerActivity, profile

    _mark_closures()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    print(json.dumps(split(prof, cap)), file=sys.stderr)


class _Spans:
    """Wall-clock time summed per phase, from hooks that cost a few microseconds a call (no profiler)."""

    def __init__(self) -> None:
        self.seconds = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        self.module_depth = 0
        self.forward_start = 0.0

    def timing(self, phase: str, fn, sign: float = 1.0):
        """``fn`` with its wall time added to ``phase`` (``sign`` -1: taken off it)."""
        @functools.wraps(fn)
        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += sign * (time.perf_counter() - start)
        return timed_call


@contextlib.contextmanager
def timed() -> Iterator[None]:
    """Runs its block with forward, backward and optimizer timed by the clock, and prints their split as
    :func:`profiled` does. torch.profiler's own cost per operator moves its split: on a Lightning fit of an MLP,
    Adam's ~90 small operators a step weigh more under it than the backward's few large ones (its backward
    0.36-0.38 of the three; timed by the clock 0.45-0.49). Here:

    - ``forward`` is the outermost ``nn.Module`` calls (global forward hooks): the model's forward. A loss
      computed outside a module is left out (on the tests' models, under 1 % of the forward);
    - ``backward`` is ``torch.autograd.backward`` (which ``Tensor.backward`` calls), outside any other phase;
    - ``optimizer`` is ``Optimizer.step`` (global step hooks) less the closures it runs, plus ``zero_grad``.

    Python between the phases is in none of them, as in :func:`profiled`."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    spans = _Spans()
    step_starts = []

    def forward_pre(_module, _args):
        if spans.module_depth == 0:
            spans.forward_start = time.perf_counter()
        spans.module_depth += 1

    def forward_post(_module, _args, _output):
        spans.module_depth -= 1
        if spans.module_depth == 0:
            spans.seconds["forward"] += time.perf_counter() - spans.forward_start

    def step_pre(_optimizer, args, kwargs):
        step_starts.append(time.perf_counter())
        # the closure's time (forward, backward, hooks) is taken off the optimizer's
        return _closure_wrapped(args, kwargs, lambda closure: spans.timing("optimizer", closure, -1.0))

    def step_post(_optimizer, _args, _kwargs):
        spans.seconds["optimizer"] += time.perf_counter() - step_starts.pop()

    handles = [register_module_forward_pre_hook(forward_pre), register_module_forward_hook(forward_post),
               register_optimizer_step_pre_hook(step_pre), register_optimizer_step_post_hook(step_post)]
    backward, zero_grad = torch.autograd.backward, torch.optim.Optimizer.zero_grad
    torch.autograd.backward = spans.timing("backward", backward)
    torch.optim.Optimizer.zero_grad = spans.timing("optimizer", zero_grad)
    try:
        yield
    finally:
        torch.autograd.backward, torch.optim.Optimizer.zero_grad = backward, zero_grad
        for handle in handles:
            handle.remove()
    whole = sum(spans.seconds.values())
    print(json.dumps({name: value / whole for name, value in spans.seconds.items()}), file=sys.stderr)


if __name__ == "__main__":
    how = {"--timed": timed, "--operators": operators}.get(sys.argv[1], profiled)
    if sys.argv[1] == "--clock":
        how = functools.partial(clocked, sys.argv[2])
        del sys.argv[1:3]
    elif how is not profiled:
        del sys.argv[1]
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    with how():
        runpy.run_path(script, run_name="__main__")
