"""torch.profiler's split of a training run into forward, backward and optimizer: the reference for the phases.

``python tests/torch_reference.py SCRIPT [ARGS...]`` runs SCRIPT under
torch.profiler (CPU) and prints ``{"forward": share, "backward": share,
"optimizer": share}`` (shares of their sum) as JSON on its last line of stderr.
A script that trains in child processes (``mp.spawn``) calls :func:`profiled`
around its training itself.

The split uses torch.profiler's own evidence, not autoitt's rules: over every
thread's event tree, ``backward`` is the autograd engine's events (top-most),
``forward`` the top-most operators that carry an autograd sequence number
(recorded with grad on: the model's, never an optimizer's no-grad update),
outside backward; ``optimizer`` is ``Optimizer.step``/``zero_grad`` less the
closures they run, which this module marks with ``record_function("closure")``
through PyTorch's global optimizer step pre-hook. Anything else is descended
into. Time outside these (Python, waits) is in none of them.
"""

from __future__ import annotations

import contextlib
import json
import runpy
import sys
from typing import Dict, Iterator


def _mark_closures() -> None:
    from torch.autograd.profiler import record_function
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def marked(fn):
        def closure():
            with record_function("closure"):
                return fn()
        return closure

    def hook(_optimizer, args, kwargs):
        if len(args) > 1 and callable(args[1]):
            return (args[0], marked(args[1])) + tuple(args[2:]), kwargs
        if callable(kwargs.get("closure")):
            return args, dict(kwargs, closure=marked(kwargs["closure"]))
        return None

    register_optimizer_step_pre_hook(hook)


def split(prof) -> Dict[str, float]:
    """Forward, backward and optimizer as shares of their sum, from a finished ``torch.profiler.profile``."""
    totals = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def walk(event) -> None:
        name = event.name
        if name.startswith("autograd::engine::evaluate_function"):
            totals["backward"] += event.cpu_time_total
        elif name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            closures = [child for child in event.cpu_children if child.name == "closure"]
            totals["optimizer"] += event.cpu_time_total - sum(c.cpu_time_total for c in closures)
            for closure in closures:
                walk(closure)
        elif name.startswith("aten::") and event.sequence_nr >= 0:
            totals["forward"] += event.cpu_time_total
        else:
            for child in event.cpu_children:
                walk(child)

    for event in prof.profiler.function_events:
        if event.cpu_parent is None:
            walk(event)
    whole = sum(totals.values())
    return {name: value / whole for name, value in totals.items()}


@contextlib.contextmanager
def profiled() -> Iterator[None]:
    """Runs its block under torch.profiler, closures marked; prints the split as JSON on stderr at the end."""
    from torch.profiler import ProfilerActivity, profile

    _mark_closures()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    print(json.dumps(split(prof)), file=sys.stderr)


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    with profiled():
        runpy.run_path(script, run_name="__main__")
