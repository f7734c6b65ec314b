"""An optimizer's closure as a task: the forward and backward it runs are told from the optimizer's own update.

``optimizer.step(closure)`` (LBFGS, every Lightning automatic-optimization
step, SAM and other two-pass optimizers) runs the model's forward and
backward *inside* PyTorch's ``Optimizer.step#...`` task. By their tasks alone,
the operators the closure runs and the optimizer's own update kernels look
alike (``aten::addmm`` and ``aten::add_`` both): the phases would call the whole
step "optimizer".

:func:`install` registers one global optimizer step pre-hook
(``torch.optim.optimizer.register_optimizer_step_pre_hook``, PyTorch's public
API) for the rest of the process, and :func:`register` one for as long as an
iteration records operators (``--torch-ops sampled``, the toggle in
:mod:`instrumenter.runtime.torch_ops`). While an ITT profiler is on
(``emit_itt``), the hook passes the optimizer
the closure wrapped so that each call of it is a task named
:data:`CLOSURE_TASK` on PyTorch's ITT domain (``torch._C._itt``, where its
operators are). The wrapper is :class:`instrumenter.runtime._around.Around`, a C type:
no Python frame between the optimizer and the user's closure (tracebacks,
``inspect.stack()`` and faulthandler dumps are as without autoitt), attribute
reads and ``repr`` pass through to the closure, and its result or exception
is the closure's, unchanged. The phases then count what a closure runs by its
own operators (:mod:`instrumenter.builtin.statistics.phases`).

What the program can see: the optimizer's step hooks (its own post-hooks)
get the wrapper in ``args``; ``type()`` of it is ``Around``; the global pre-hook
is a ``Guarded`` (C), which asks whether a profiler is on and calls no Python
where none is. Nothing else.

Imported by the copies' runtime (:mod:`instrumenter.runtime.collection`,
:mod:`instrumenter.runtime.window`): the standard library only; torch is found in
``sys.modules`` (the script imported it), never imported here.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Optional, Tuple

from .extensions import load
from .guest import programs

#: The name of a closure's task (on PyTorch's ITT domain); the phases recognise it by this name.
CLOSURE_TASK = "Optimizer.closure"

_lock = threading.Lock()
_installed = False


def install() -> bool:
    """Registers the closure hook once per process, if the script has imported ``torch.optim``; True once it is.

    Called at each training region's start (cheap once installed) by a copy that records every operator, or
    none: a script that imports torch inside its training function has it by then. PyTorch then calls the hook
    at every optimizer step, about 2 µs a step between a step's cold code (the check whether a profiler is on),
    so a copy that samples operators registers it only while an iteration records them (:func:`register`)."""
    global _installed
    if _installed:
        return True
    found = _registrar()
    if found is None:
        return False
    with _lock:
        if not _installed:
            _installed = True  # tried once: a hook that cannot be made is not retried at every region
            try:
                found[0](_hook(*found[1:]))
            except Exception as error:  # a marker must never break the program: closures then count as optimizer
                if programs(error):
                    raise
                return False
    return True


def register() -> Any:
    """Registers the closure hook for a while (an iteration that records operators, ``torch_ops``): the handle
    to ``remove()`` it with, or None where it cannot be (no ``torch.optim`` yet, or no ITT in this torch)."""
    found = _registrar()
    if found is None:
        return None
    try:
        return found[0](_hook(*found[1:]))
    except Exception as error:  # as install(): without it, closures count as optimizer
        if programs(error):
            raise
        return None


def _registrar() -> Optional[Tuple[Any, Any, Any]]:
    """(``register_optimizer_step_pre_hook``, torch, ``torch._C._itt``), or None where the script has not
    imported ``torch.optim`` or its torch has no ITT."""
    optimizer = sys.modules.get("torch.optim.optimizer")
    torch = sys.modules.get("torch")
    if optimizer is None or torch is None:
        return None
    registrar = getattr(optimizer, "register_optimizer_step_pre_hook", None)
    itt = getattr(getattr(torch, "_C", None), "_itt", None)
    if registrar is None or itt is None or not itt.is_available():
        return None
    return registrar, torch, itt


def around_module() -> Any:
    """``instrumenter.runtime._around``: the wrappers that leave no frame (``Around``, ``Rebound``, ``Guarded``)."""
    return load("_around")


def _hook(torch: Any, itt: Any):
    """The pre-hook: the step's closure (``step(closure)`` or ``step(closure=...)``) wrapped, while a profiler is on."""
    Around = around_module().Around

    begin = functools.partial(itt.rangePush, CLOSURE_TASK)
    end = itt.rangePop

    def wrap_closure(_optimizer: Any, args: Tuple[Any, ...], kwargs: dict) -> Optional[Tuple[tuple, dict]]:
        if len(args) > 1 and callable(args[1]) and not isinstance(args[1], Around):
            return (args[0], Around(args[1], begin, end)) + tuple(args[2:]), kwargs
        closure = kwargs.get("closure")
        if closure is not None and callable(closure) and not isinstance(closure, Around):
            return args, dict(kwargs, closure=Around(closure, begin, end))
        return None

    # asked in C at every step: no Python frame of autoitt's where no profiler is on
    return around_module().Guarded(torch.autograd._profiler_enabled, wrap_closure)
