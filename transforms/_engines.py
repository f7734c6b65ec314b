"""Training engines: library objects whose one method runs a whole training or evaluation loop.

pytorch-ignite's: ``trainer.run(loader, max_epochs=...)`` trains and
``evaluator.run(loader)`` evaluates, with the same method. Which one an
engine does is told by how the script made it (:func:`engine_binding`):

* ``create_supervised_trainer(...)`` / ``create_supervised_evaluator(...)``
  say it in their name;
* ``Engine(process_function)`` (and ``DeterministicEngine``) runs the script's
  own function once per batch: an engine whose function updates parameters
  trains, one whose function only runs the model evaluates. That needs the
  detection of the function's body, so :mod:`transforms._detect` decides it
  from the :class:`EngineBinding` this module records.

A trainer class of another library whose ``run()`` holds its loop (minGPT's
``trainer = Trainer(config, model, data)``, then ``trainer.run()``) trains
too; autoitt has no callbacks for it, so the call is one task.

A name bound to an engine in several places keeps the first binding; ``run``
of any other object (a TF1 session, a thread, ``subprocess``) is never taken
for an engine's.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple, Optional

from ._names import ImportTable, dotted

#: The method that runs an engine's loop.
RUN = "run"

#: Factories that make an engine with a process function of their own: the role it has.
_FACTORIES = {
    "ignite.engine.create_supervised_trainer": "train-call",
    "ignite.engine.create_supervised_evaluator": "eval",
}
#: A trainer class of another library (minGPT's Trainer, a PPOTrainer) whose run() trains.
_TRAINER_CLASS = re.compile(r"Trainer$")
#: Engines built around the script's own process function.
_ENGINE_CLASSES = {
    "ignite.engine.Engine", "ignite.engine.engine.Engine",
    "ignite.engine.DeterministicEngine", "ignite.engine.deterministic.DeterministicEngine",
}


class EngineBinding(NamedTuple):
    """How the script made one engine.

    ``role``: ``train-call`` or ``eval`` when the factory says it, ``None`` when the process function
    decides. ``made_by``: the call as a reason shows it (``create_supervised_trainer()``,
    ``Engine(train_step)``). ``process``: the process function's expression given to ``Engine``.
    ``line``: where it was made. ``callbacks``: autoitt can mark its epochs and steps at run time
    (instrumenter.runtime.libraries), an ignite engine; else its ``run()`` is one task.
    """

    role: Optional[str]
    made_by: str
    process: Optional[ast.AST]
    line: int
    callbacks: bool = True


def engine_binding(value: ast.Call, imports: ImportTable) -> Optional[EngineBinding]:
    """The engine ``value`` makes, if it makes one (``trainer = create_supervised_trainer(...)``)."""
    resolved = imports.resolve(value.func) or ""
    shown = dotted(value.func) or resolved.rsplit(".", 1)[-1]
    if resolved in _FACTORIES:
        return EngineBinding(_FACTORIES[resolved], f"{shown}()", None, value.lineno)
    if resolved in _ENGINE_CLASSES:
        process = value.args[0] if value.args else next(
            (k.value for k in value.keywords if k.arg == "process_function"), None)
        given = dotted(process) if process is not None else None
        return EngineBinding(None, f"{shown}({given or '...'})", process, value.lineno)
    if _TRAINER_CLASS.search(resolved) and not resolved.startswith(_CALLBACK_LIBRARIES):
        return EngineBinding("train-call", f"{shown}()", None, value.lineno, callbacks=False)
    return None


#: Libraries whose trainers train through another method (fit, train) that autoitt knows.
_CALLBACK_LIBRARIES = ("lightning.", "pytorch_lightning.", "transformers.", "keras.", "tf_keras.")


def engine_run(call: ast.Call, engines) -> Optional[str]:
    """The engine's name when ``call`` is ``<engine>.run(...)`` of an engine the script made, else ``None``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != RUN:
        return None
    receiver = dotted(func.value)
    return receiver if receiver in engines else None
