"""Epoch, step and eval tasks inside library training calls, through the libraries' own callbacks.

A copy wraps a library call it marks (``model.fit(...)``, ``trainer.fit(model)``,
``trainer.train()``, ``model.evaluate(...)``, ...) in
``with itt.library(<receiver>, "<method>", _autoitt_domain):``. For the length
of that one statement, :func:`attach` gives the library a callback that begins
and ends tasks on the copy's domain, named as loop markers name them
(:data:`EPOCH`, :data:`STEP`, :data:`EVAL_LOOP`, :data:`EVAL`), through the
copy's ``itt`` (so a collection window counts these steps too):

* Keras (Keras 3 and tf.keras): the model's method is wrapped on the instance,
  so the callback joins the call's ``callbacks`` argument (given positionally,
  by keyword or through ``**kwargs``) in a new list; the user's list is never
  changed;
* Lightning (``lightning.pytorch`` and ``pytorch_lightning``): the trainer's
  ``callbacks`` becomes a new list holding the callback, wherever the trainer
  was made;
* Hugging Face ``Trainer``: ``add_callback``/``remove_callback`` for epochs and
  steps; its ``prediction_step`` and ``evaluate`` are wrapped on the instance
  for eval batches and eval runs (its callbacks have no "before" for them);
* Stable-Baselines3 ``model.learn(...)``: the method wrapped on the instance,
  as Keras's, so the callback joins the call's ``callback`` argument (a new
  list holding the user's callback, list or function, then autoitt's); a step
  is one iteration of its loop: a rollout, then the update that follows it;
* pytorch-ignite engines (``trainer.run(...)``, ``evaluator.run(...)``, the
  role given by the copy, since the method is the same): handlers on the
  engine's own events, the "started" ones run before the user's handlers of the
  same event and the "completed" ones after them (so an evaluation the user
  runs on ``EPOCH_COMPLETED`` is inside its epoch), removed afterwards.

When the statement ends, however it ends, every task the callback left open
is ended and the library object is as it was. An object of any other library
(scikit-learn's ``fit``, say) gets nothing: the call stays one task, and a
line on stderr says so once per class and method.

Imported by instrumented copies: standard library only; a framework is imported
only when the object comes from it (so it is imported already).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from .closures import around_module

#: The task names the callbacks use: those of loop markers (a loop's tasks are
#: ``<label>_loop`` around, ``<label>`` per iteration; see transforms._markers).
EPOCH = "epoch"
STEP = "step"
EVAL_LOOP = "eval_loop"
EVAL = "eval"

#: (module prefix of the object's class, library, the package its callback classes come from): the first
#: match in the class's MRO decides.
_LIBRARIES = (
    ("keras.", "keras", "keras"), ("tf_keras.", "keras", "tf_keras"),
    ("tensorflow.python.keras.", "keras", "tensorflow.python.keras"),
    ("lightning.pytorch.", "lightning", "lightning.pytorch"), ("pytorch_lightning.", "lightning", "pytorch_lightning"),
    ("transformers.", "transformers", "transformers"), ("ignite.", "ignite", "ignite"),
    ("stable_baselines3.", "stable_baselines3", "stable_baselines3.common.callbacks"),
)

#: What ``role`` a copy gives ``attach`` where the method's name does not say it.
ROLES = ("train", "eval")

_noted: Set[Tuple[str, str]] = set()
_noted_lock = threading.Lock()


class _Tasks:
    """The tasks one call's callback has open, innermost last.

    A hook ends a task only when it is the innermost one open (a library may
    call an end hook without its begin, e.g. after an exception it handled);
    whatever is still open when the call ends is ended then, innermost first.
    """

    def __init__(self, itt: Any, domain: Any) -> None:
        self._itt = itt
        self._domain = domain
        self._open: List[str] = []

    def begin(self, name: str) -> None:
        self._itt.task_begin(self._domain, name)
        self._open.append(name)

    def end(self, name: str) -> None:
        if self._open and self._open[-1] == name:
            self._open.pop()
            self._itt.task_end(self._domain)

    def end_all(self) -> None:
        while self._open:
            self._open.pop()
            self._itt.task_end(self._domain)

    def around(self, name: str, function: Callable) -> Callable:
        """``function`` run inside a task ``name``, through ``Around`` (C): no frame of autoitt's under it."""
        return around_module().Around(function, functools.partial(self.begin, name), functools.partial(self.end, name))


@contextlib.contextmanager
def attach(itt: Any, receiver: Any, method: str, domain: Any, role: Optional[str] = None) -> Iterator[None]:
    """For the ``with`` block: ``receiver``'s library calls back into tasks on ``domain`` (module docstring);
    ``role`` (:data:`ROLES`) where ``method`` does not say whether the call trains or evaluates."""
    tasks = _Tasks(itt, domain)
    undo: Optional[Callable[[], None]] = None
    found = library_of(receiver)
    if found is None:
        _note(receiver, method, "not a Keras, Lightning, Hugging Face, ignite or Stable-Baselines3 object: the call "
                                "is one task")
    else:
        library, package = found
        try:
            undo = _ATTACH[library](receiver, method, role, tasks, package)
        except _CannotAttach as exc:
            _note(receiver, method, f"{exc}: the call is one task")
        except (ImportError, AttributeError) as exc:
            # A version of the library laid out otherwise: the call runs as without autoitt.
            _note(receiver, method, f"no callback could be made ({type(exc).__name__}: {exc}): the call is one task")
    try:
        yield
    finally:
        tasks.end_all()
        if undo is not None:
            undo()


def library_of(receiver: Any) -> Optional[Tuple[str, str]]:
    """(library, package of its callbacks) that ``receiver``'s class comes from, if one of :data:`_LIBRARIES`."""
    for cls in type(receiver).__mro__:
        module = cls.__module__ + "."
        for prefix, library, package in _LIBRARIES:
            if module.startswith(prefix):
                return library, package
    return None


class _CannotAttach(Exception):
    pass


def _note(receiver: Any, method: str, why: str) -> None:
    key = (type(receiver).__qualname__, method)
    with _noted_lock:
        if key in _noted:
            return
        _noted.add(key)
    print(f"autoitt: {key[0]}.{method}(): {why}", file=sys.stderr)


def _set_on_instance(receiver: Any, name: str, value: Any) -> Callable[[], None]:
    """Bind ``name`` on the instance (past any ``__setattr__`` of the library's); the undo."""
    own = vars(receiver)
    had, previous = name in own, own.get(name)
    object.__setattr__(receiver, name, value)

    def undo() -> None:
        if had:
            object.__setattr__(receiver, name, previous)
        else:
            object.__delattr__(receiver, name)
    return undo


# -- Keras --------------------------------------------------------------------------------------

def _keras(model: Any, method: str, role: Optional[str], tasks: _Tasks, package: str) -> Callable[[], None]:
    callback = _callback(importlib.import_module(f"{package}.callbacks").Callback, tasks, _KERAS_HOOKS)

    def joined(given: Any) -> Any:
        if given is None or isinstance(given, (list, tuple)):
            return [*(given or ()), callback]  # a new list: the user's stays as it is
        _note(model, method, f"callbacks given as a {type(given).__name__}, not a list: the call is one task")
        return _AS_GIVEN
    return _join_argument(model, method, "callbacks", joined)


#: What a ``join`` of :func:`_join_argument` returns to leave the call as it is.
_AS_GIVEN = object()


def _join_argument(receiver: Any, method: str, parameter: str, join: Callable[[Any], Any]) -> Callable[[], None]:
    """Wrap ``receiver.method`` on the instance so that each call's ``parameter`` (given positionally, by keyword
    or through ``**kwargs``; None when not given) is replaced by ``join(given)`` (or kept, for :data:`_AS_GIVEN`);
    the undo."""
    original = getattr(receiver, method)
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        raise _CannotAttach("its signature cannot be read") from None
    if parameter not in signature.parameters:
        raise _CannotAttach(f"it takes no {parameter}")

    def with_joined(*args, **kwargs) -> Optional[Tuple[tuple, dict]]:
        """The call's arguments with the join made, or None: the call as it is."""
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None  # the call is wrong: let the library say so, as without autoitt
        value = join(bound.arguments.get(parameter))
        if value is _AS_GIVEN:
            return None
        bound.arguments[parameter] = value
        return bound.args, bound.kwargs

    # Rebound (C) calls the method itself once the arguments are made: no frame of autoitt's is under it, so the
    # user's callbacks, and what the method raises, see the stack they see without autoitt.
    return _set_on_instance(receiver, method, around_module().Rebound(original, with_joined))


#: hook -> (what it does, the task): epochs, training batches, and evaluation/prediction runs and batches.
_KERAS_HOOKS = {
    "on_epoch_begin": ("begin", EPOCH), "on_epoch_end": ("end", EPOCH),
    "on_train_batch_begin": ("begin", STEP), "on_train_batch_end": ("end", STEP),
    "on_test_begin": ("begin", EVAL_LOOP), "on_test_end": ("end", EVAL_LOOP),
    "on_test_batch_begin": ("begin", EVAL), "on_test_batch_end": ("end", EVAL),
    "on_predict_begin": ("begin", EVAL_LOOP), "on_predict_end": ("end", EVAL_LOOP),
    "on_predict_batch_begin": ("begin", EVAL), "on_predict_batch_end": ("end", EVAL),
}


# -- Lightning ----------------------------------------------------------------------------------

def _lightning(trainer: Any, method: str, role: Optional[str], tasks: _Tasks, package: str) -> Callable[[], None]:
    base = importlib.import_module(package).Callback
    original = getattr(trainer, "callbacks", None)
    if not isinstance(original, list):
        raise _CannotAttach("it has no callbacks list")
    callback = _callback(base, tasks, _LIGHTNING_HOOKS)
    trainer.callbacks = [*original, callback]

    def undo() -> None:
        current = trainer.callbacks
        if isinstance(current, list) and current == [*original, callback]:
            trainer.callbacks = original  # the very list the trainer had
        elif isinstance(current, list):
            trainer.callbacks = [c for c in current if c is not callback]  # the run changed it: keep its changes
    return undo


#: Training epochs and batches; validation, test and predict runs and batches (the sanity check's too).
_LIGHTNING_HOOKS = {
    "on_train_epoch_start": ("begin", EPOCH), "on_train_epoch_end": ("end", EPOCH),
    "on_train_batch_start": ("begin", STEP), "on_train_batch_end": ("end", STEP),
    **{hook: action for stage in ("validation", "test", "predict") for hook, action in (
        (f"on_{stage}_start", ("begin", EVAL_LOOP)), (f"on_{stage}_end", ("end", EVAL_LOOP)),
        (f"on_{stage}_batch_start", ("begin", EVAL)), (f"on_{stage}_batch_end", ("end", EVAL)))},
}


# -- Hugging Face -------------------------------------------------------------------------------

def _transformers(trainer: Any, method: str, role: Optional[str], tasks: _Tasks,
                  package: str) -> Callable[[], None]:
    if not all(hasattr(trainer, name) for name in ("add_callback", "remove_callback", "prediction_step",
                                                   "evaluate")):
        raise _CannotAttach("not a transformers.Trainer")
    base = importlib.import_module(package).TrainerCallback
    callback = _callback(base, tasks, _TRANSFORMERS_HOOKS)
    trainer.add_callback(callback)
    # Its callbacks have no hook before an evaluation or an eval batch: the methods are wrapped instead.
    undo_steps = _set_on_instance(trainer, "prediction_step", tasks.around(EVAL, trainer.prediction_step))
    undo_runs = _set_on_instance(trainer, "evaluate", tasks.around(EVAL_LOOP, trainer.evaluate))

    def undo() -> None:
        undo_runs()
        undo_steps()
        trainer.remove_callback(callback)
    return undo


#: Epochs and optimizer steps (evaluations: see _transformers).
_TRANSFORMERS_HOOKS = {
    "on_epoch_begin": ("begin", EPOCH), "on_epoch_end": ("end", EPOCH),
    "on_step_begin": ("begin", STEP), "on_step_end": ("end", STEP),
}


def _callback(base: type, tasks: _Tasks, hooks: Dict[str, Tuple[str, str]], **more: Any) -> Any:
    """An instance of a subclass of the library's callback ``base`` whose ``hooks`` begin or end tasks (and
    with ``more`` in its class: what the library requires of every callback).

    Hooks take any arguments: each library calls them its own way, and only the moment matters.
    """
    def hook(action: str, task: str) -> Callable:
        step = getattr(tasks, action)

        def run(self, *args, **kwargs) -> None:
            step(task)
        return run

    namespace = {name: hook(action, task) for name, (action, task) in hooks.items()}
    namespace.update(more)
    namespace["__doc__"] = "autoitt's tasks for the epochs, steps and evaluations of one call."
    return type("AutoittTasks", (base,), namespace)()


# -- pytorch-ignite -----------------------------------------------------------------------------

def _ignite(engine: Any, method: str, role: Optional[str], tasks: _Tasks, package: str) -> Callable[[], None]:
    if role not in ROLES:
        raise _CannotAttach("whether it trains or evaluates was not given")
    events = importlib.import_module(f"{package}.engine").Events
    handlers = getattr(engine, "_event_handlers", None)
    if not isinstance(handlers, dict) or not hasattr(engine, "remove_event_handler"):
        raise _CannotAttach("not an ignite Engine")
    added: List[Tuple[Any, Callable]] = []

    def undo() -> None:
        for event, handler in added:
            with contextlib.suppress(ValueError):  # the run removed it already
                engine.remove_event_handler(handler, event)

    try:
        for event_name, (action, task) in _IGNITE_EVENTS[role].items():
            event = getattr(events, event_name)
            handler = _ignite_handler(getattr(tasks, action), task)
            engine.add_event_handler(event, handler)
            added.append((event, handler))
            listed = handlers.get(event)
            if action == "begin" and isinstance(listed, list) and listed and listed[-1][0] is handler:
                listed.insert(0, listed.pop())  # before the user's handlers of the event, whose order stays
    except Exception:
        undo()  # a version of ignite laid out otherwise: the engine as it was, the call one task (attach says so)
        raise
    return undo


def _ignite_handler(step: Callable[[str], None], task: str) -> Callable[[], None]:
    """A handler taking no argument (ignite then passes none): it only marks the moment."""
    def handler() -> None:
        step(task)
    return handler


#: role -> event -> (what it does, the task). A training run: its epochs and iterations; an evaluation run
#: (one epoch over the data): the run and its iterations.
_IGNITE_EVENTS = {
    "train": {"EPOCH_STARTED": ("begin", EPOCH), "EPOCH_COMPLETED": ("end", EPOCH),
              "ITERATION_STARTED": ("begin", STEP), "ITERATION_COMPLETED": ("end", STEP)},
    "eval": {"STARTED": ("begin", EVAL_LOOP), "COMPLETED": ("end", EVAL_LOOP),
             "ITERATION_STARTED": ("begin", EVAL), "ITERATION_COMPLETED": ("end", EVAL)},
}


# -- Stable-Baselines3 ---------------------------------------------------------------------------

def _stable_baselines3(model: Any, method: str, role: Optional[str], tasks: _Tasks,
                       package: str) -> Callable[[], None]:
    callbacks = importlib.import_module(package)
    # Its loop (on- and off-policy alike): on_training_start, then per iteration a rollout (on_rollout_start ...
    # on_rollout_end) and the update that follows it, then on_training_end. A step runs from one rollout's start to
    # the next one's (or the training's end), so the update is in the step it belongs to.
    def next_step(self) -> None:
        tasks.end(STEP)  # the iteration before, if one is open
        tasks.begin(STEP)

    callback = _callback(callbacks.BaseCallback, tasks, _STABLE_BASELINES3_HOOKS, _on_step=_go_on,
                         _on_rollout_start=next_step)

    def joined(given: Any) -> Any:
        if given is None:
            return callback
        if isinstance(given, list):
            return [*given, callback]  # a new list: the user's stays as it is
        if isinstance(given, callbacks.BaseCallback):
            return [given, callback]
        # a function (locals, globals) -> bool: what the method itself would have made of it
        return [callbacks.ConvertCallback(given), callback]
    return _join_argument(model, method, "callback", joined)


def _go_on(self) -> bool:
    """A callback's every-environment-step hook, which SB3 requires: True, training goes on."""
    return True


_STABLE_BASELINES3_HOOKS = {"_on_training_end": ("end", STEP)}


_ATTACH = {"keras": _keras, "lightning": _lightning, "transformers": _transformers, "ignite": _ignite,
           "stable_baselines3": _stable_baselines3}
