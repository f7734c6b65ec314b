"""What a single call or name says about training, one recogniser per idiom.

Every recogniser returns a short human reason (shown by ``autoitt loops``) or
``None``. They look at one ``ast`` node at a time; walking the script and
following calls is the job of :mod:`transforms._index` and :mod:`transforms._roles`.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterable, Optional, Set, Tuple

from ._aliases import Alias, function_alias
from ._engines import EngineBinding, engine_binding
from ._markers import LIBRARY_EVALUATION
from ._names import ImportTable, NamePattern, dotted, last_name

# A name that "clearly names an optimizer": opt, optim, optimizer, opt_g,
# optimizer_d, self.optimizer2 ... but never a scheduler.
_OPTIMIZER_NAME = NamePattern(r"^(?:.*_)?(?:opt|optim|optimizer|optimiser)(?:_.*|\d*)$", re.I)
_SCHEDULER_NAME = NamePattern(r"sched|(?:^|_)lr(?:_|$)", re.I)
# TF1 ops fetched to train: train, train_op, train_step, optimize, update_op ...
_TRAIN_OP_NAME = NamePattern(
    r"^(?:.*_)?(?:train|training|optimi[sz]e|minimi[sz]e|update)(?:_?(?:op|ops|step))?$", re.I
)
# Functions whose call is one training step: train_step, _train_step, training_step,
# train_batch, train_on_batch, update_step, step_fn ..., also under the prefixes JAX code
# gives a compiled copy (p_train_step for jax.pmap, jit_train_step, compiled_step_fn).
_TRAIN_STEP_FUNCTION = NamePattern(
    r"^_*(?:(?:p|pmap|pmapped|jit|jitted|compiled|parallel)_)?"
    r"(?:train(?:ing)?_?(?:step|batch|iter|iteration|on_batch)|(?:update|optimi[sz]e)_step|(?:train_)?step_fn"
    r"|train_(?:rlhf|ppo|dpo|grpo)(?:_step)?|(?:ppo|dpo|grpo)_(?:step|update))$",
    re.I,
)
_EPOCH_NAME = NamePattern(r"epoch", re.I)
# A count within one epoch (steps_per_epoch, iters_per_epoch): a loop over it iterates over steps.
_PER_EPOCH = NamePattern(r"per_?epoch", re.I)
_EVAL_FUNCTION = NamePattern(
    r"(?:^|_)(?:eval|evaluate|evaluation|validate|validation|valid|val|test|testing|inference|predict)(?:_|$)",
    re.I,
)
_TRAINER_NAME = NamePattern(r"trainer|estimator|classifier|regressor|learner", re.I)
# What a TF Estimator's train() takes besides input_fn; PyTorch's train(mode) takes none of them.
_ESTIMATOR_TRAIN_KEYWORDS = {"input_fn", "max_steps", "hooks", "steps", "saving_listeners"}
# An input function passed by name: input_fn, train_input_fn, input_func, make_fn ...
_INPUT_FN_NAME = NamePattern(r"input_?fn|input_func|(?:^|_)fn$", re.I)
# LightningCLI: Lightning 2 and pytorch_lightning 1.7+ (cli), 1.5-1.6 (utilities.cli).
_LIGHTNING_CLI = {
    "lightning.pytorch.cli.LightningCLI",
    "pytorch_lightning.cli.LightningCLI",
    "pytorch_lightning.utilities.cli.LightningCLI",
}

_COMPILE_DECORATORS = {
    "tensorflow.function": "@tf.function",
    "tf.function": "@tf.function",
    "torch.jit.script": "@torch.jit.script",
    "torch.jit.trace": "@torch.jit.trace",
    "torch.compile": "@torch.compile",
    "jax.jit": "@jax.jit",
    "jax.pmap": "@jax.pmap",
    "numba.jit": "@numba.jit",
    "numba.njit": "@numba.njit",
}
_NO_GRAD_CONTEXTS = {
    "torch.no_grad": "torch.no_grad()",
    "torch.inference_mode": "torch.inference_mode()",
    "torch.autograd.no_grad": "torch.no_grad()",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad()",
}
# Calls that never run a model: seeing only these in a loop is not a forward pass.
_NOT_FORWARD = frozenset(
    """print len range enumerate zip str int float bool list dict tuple set sum min max abs
    round isinstance issubclass format open sorted reversed iter next getattr setattr hasattr
    repr type id map filter any all append extend insert pop items keys values get update add
    join split strip replace item tolist numpy cpu detach to size shape reshape view clone
    copy write flush sleep time perf_counter info debug warning error log extend_left
    set_description set_postfix""".split()
)


class Bindings:
    """Names the script binds to training objects.

    ``optimizers``: dotted targets assigned an optimizer constructor
    (``optimizer``, ``self.opt_d``). ``train_ops``: targets assigned the op a TF1
    ``optimizer.minimize(...)`` returns. ``instances``: name -> class defined in
    this file, from ``trainer = Trainer(...)``. ``external``: names assigned
    the result of calling something imported (``model = keras.Sequential()``).
    ``aliases``: names bound to a wrapped function (:func:`~transforms._aliases.function_alias`,
    ``p_train_step = jax.pmap(train_step)``): calling one runs the function it wraps.
    ``engines``: names bound to a training engine (:mod:`transforms._engines`), the first binding each.
    """

    __slots__ = ("optimizers", "train_ops", "instances", "external", "aliases", "engines")

    def __init__(self) -> None:
        self.optimizers: Set[str] = set()
        self.train_ops: Set[str] = set()
        self.instances: Dict[str, str] = {}
        self.external: Set[str] = set()
        self.aliases: Dict[str, Alias] = {}
        self.engines: Dict[str, EngineBinding] = {}


def is_optimizer_constructor(resolved: str) -> bool:
    if "lr_scheduler" in resolved or "schedules" in resolved:
        return False
    return (
        ".optim." in resolved
        or ".optimizers." in resolved
        or resolved.endswith("Optimizer")
        or resolved.startswith("optax.")
    )


def collect_bindings(assignments: Iterable[ast.stmt], imports: ImportTable, classes: Set[str]) -> Bindings:
    """What the script's assignment statements bind to optimizers, train ops and classes."""
    bindings = Bindings()
    for node in assignments:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not isinstance(value, ast.Call):
            continue
        names = [dotted(t) for t in targets]
        names = [n for n in names if n]
        if not names:
            continue
        alias = function_alias(value, imports)
        if alias is not None:
            # Not for a name bound to itself wrapped (model = torch.compile(model)): a model, not a step.
            bindings.aliases.update((n, alias) for n in names if n != dotted(alias.target))
        callee = imports.resolve(value.func) or ""
        if is_optimizer_constructor(callee):
            bindings.optimizers.update(names)
        elif isinstance(value.func, ast.Attribute) and value.func.attr in ("minimize", "apply_gradients"):
            bindings.train_ops.update(names)
        elif callee in classes:
            for name in names:
                bindings.instances[name] = callee
        elif imports.is_imported(value.func):
            bindings.external.update(names)
            engine = engine_binding(value, imports)
            if engine is not None:
                for name in names:
                    bindings.engines.setdefault(name, engine)
    return bindings


def _names_an_optimizer(node: ast.AST, bindings: Bindings) -> bool:
    name = dotted(node)
    if name is None:
        return False
    if name in bindings.optimizers:
        return True
    last = last_name(node) or ""
    return bool(_OPTIMIZER_NAME.match(last)) and not _SCHEDULER_NAME.search(last)


def _applies_gradients(call: ast.Call, receiver: ast.AST, bindings: Bindings) -> bool:
    """Keras 3's ``optimizer.apply(grads, trainable_variables)`` (the JAX backend's
    ``stateless_apply(optimizer_variables, grads, trainable_variables)``): ``apply`` names
    too many things (``opt = parse_args()``), so the object must be bound to an optimizer
    or the call be given gradients."""
    if not call.args or not _names_an_optimizer(receiver, bindings):
        return False
    if dotted(receiver) in bindings.optimizers:
        return True
    return any(re.search(r"grad", last_name(node) or "", re.I)
               for arg in call.args for node in ast.walk(arg))


def _fetches_train_op(node: ast.AST, bindings: Bindings) -> Optional[str]:
    """The train op among ``sess.run``'s fetches (a name, or one in a list/tuple/dict)."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for element in node.elts:
            found = _fetches_train_op(element, bindings)
            if found:
                return found
        return None
    if isinstance(node, ast.Dict):
        for element in node.values:
            found = _fetches_train_op(element, bindings)
            if found:
                return found
        return None
    name = dotted(node)
    if name is None:
        return None
    if name in bindings.train_ops or _TRAIN_OP_NAME.match(last_name(node) or ""):
        return name
    return None


def update_evidence(call: ast.Call, bindings: Bindings) -> Optional[str]:
    """Why this call updates parameters, or ``None``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        receiver = dotted(func.value)
        shown = receiver if receiver else "..."
        attr = func.attr
        if attr == "backward":
            if call.args:
                return f"{shown}.backward({dotted(call.args[0]) or '...'})"
            return f"{shown}.backward()"
        if attr == "step" and _names_an_optimizer(func.value, bindings):
            return f"{shown}.step()"
        if attr == "step" and call.args and _names_an_optimizer(call.args[0], bindings):
            return f"{shown}.step({dotted(call.args[0])})"
        if attr == "step" and (call.args or call.keywords) and _TRAINER_NAME.search(last_name(func.value) or ""):
            return f"{shown}.step() (a trainer's update: trl's ppo_trainer.step(queries, responses, rewards))"
        if attr == "optimizer_step":
            return f"{shown}.optimizer_step()"
        if attr == "minimize" and _names_an_optimizer(func.value, bindings):
            return f"{shown}.minimize()"
        if attr == "apply_gradients":
            return f"{shown}.apply_gradients()"
        if attr in ("apply", "stateless_apply") and _applies_gradients(call, func.value, bindings):
            return f"{shown}.{attr}() (Keras 3 optimizer)"
        if attr == "train_on_batch":
            return f"{shown}.train_on_batch()"
        if attr == "run":
            fetches = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg == "fetches"), None
            )
            if fetches is not None:
                op = _fetches_train_op(fetches, bindings)
                if op:
                    return f"{shown}.run({op})"
    callee = last_name(func)
    if _computes_gradients_jax(call):
        return f"{dotted(func) or callee}() (gradients)"
    if callee == "apply_updates":
        # optax.apply_updates(params, updates): the new parameters of a JAX step.
        return f"{dotted(func) or callee}()"
    alias = bindings.aliases.get(dotted(func) or "")
    if alias is not None and _TRAIN_STEP_FUNCTION.match(last_name(alias.target) or ""):
        return f"calls {dotted(func)}() = {alias.shown}"
    if callee and _TRAIN_STEP_FUNCTION.match(callee):
        return f"calls {dotted(func) or callee}()"
    return None


# An environment an RL loop steps: env, envs, train_env, vec_env, venv, environment ...
_ENVIRONMENT_NAME = NamePattern(r"^(?:.*_)?(?:envs?|environments?|venv)$", re.I)


def environment_step(call: ast.Call) -> Optional[str]:
    """``envs.step()``-style text when ``call`` steps a reinforcement-learning environment, or ``None``."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "step" and _ENVIRONMENT_NAME.match(last_name(func.value) or ""):
        return f"{dotted(func) or 'env.step'}()"
    return None


def computes_gradients(call: ast.Call) -> bool:
    """True for an update that only computes gradients (``loss.backward()``, JAX's ``jax.grad(loss)``):
    the optimizer applies them elsewhere, and may do so once for many of them."""
    return (isinstance(call.func, ast.Attribute) and call.func.attr == "backward") or _computes_gradients_jax(call)


def _computes_gradients_jax(call: ast.Call) -> bool:
    """``jax.grad(loss_fn)``, ``jax.value_and_grad(...)`` (also called at once: ``jax.grad(f)(params)``)."""
    name = dotted(call.func) or ""
    return name in ("jax.grad", "jax.value_and_grad", "value_and_grad", "grad") or name.endswith(".value_and_grad")


def train_call(call: ast.Call, imports: ImportTable) -> Optional[str]:
    """The task label for a call that trains inside a library, or ``None``.

    ``model.fit(...)`` (Keras, Lightning, scikit-learn), ``trainer.train()``
    (Hugging Face), ``estimator.train(input_fn=...)`` or
    ``estimator.train(train_input_fn, ...)``, ``tf.estimator.train_and_evaluate(...)``,
    ``LightningCLI(...)``. PyTorch's ``model.train()``/``model.train(False)``/
    ``model.train(mode=True)`` only switches mode and is not one.
    """
    found = _library_training(call, imports)
    return found[0] if found else None


def train_call_rule(call: ast.Call, imports: ImportTable) -> Optional[str]:
    """Why ``call`` trains, for the idioms whose name alone does not say it, or ``None``."""
    found = _library_training(call, imports)
    return found[1] if found else None


def _library_training(call: ast.Call, imports: ImportTable) -> Optional[Tuple[str, Optional[str]]]:
    """(label, rule or ``None``) of :func:`train_call`."""
    func = call.func
    resolved = imports.resolve(func) or ""
    if resolved in _LIGHTNING_CLI:
        run = next((k.value for k in call.keywords if k.arg == "run"), None)
        if isinstance(run, ast.Constant) and run.value is False:
            return None  # builds the trainer only; its cli.trainer.fit(...) is the call that trains
        return "LightningCLI", (f"{dotted(func) or 'LightningCLI'}() trains inside Lightning: without "
                                "run=False it runs the command line's Trainer subcommand (fit, validate, ...)")
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in ("fit", "fit_generator") and (call.args or call.keywords):
        return "fit", None
    if func.attr == "learn" and any(k.arg == "total_timesteps" for k in call.keywords):
        return "learn", (f"{dotted(func) or 'learn'}(total_timesteps=...) trains inside a library: a reinforcement "
                         "learning agent (Stable-Baselines3's model.learn)")
    if func.attr == "fit" and _TRAINER_NAME.search(dotted(func.value) or ""):
        return "fit", None
    if func.attr == "train":
        # a trainer made in the call (detectron2's DefaultTrainer(cfg).train()) is named by its class
        receiver = dotted(func.value) or (last_name(func.value.func) or "" if isinstance(func.value, ast.Call) else "")
        keywords = {k.arg for k in call.keywords}
        if _TRAINER_NAME.search(receiver.rsplit(".", 1)[-1]) or keywords & {"input_fn", "max_steps", "hooks"}:
            return "train", None
        if call.args and _is_input_function(call.args[0]):
            return "train", (f"{dotted(func) or 'train'}() trains inside a library: its first argument is an "
                             "input function, as TF Estimator.train(input_fn, ...)'s is (PyTorch's train(mode) "
                             "takes a bool)")
        if keywords & _ESTIMATOR_TRAIN_KEYWORDS:
            keyword = sorted(keywords & _ESTIMATOR_TRAIN_KEYWORDS)[0]
            return "train", (f"{dotted(func) or 'train'}() trains inside a library: it takes {keyword}=, as TF "
                             "Estimator.train does (PyTorch's train(mode) does not)")
    if resolved.endswith("estimator.train_and_evaluate"):
        return "train_and_evaluate", None
    return None


def _is_input_function(node: ast.AST) -> bool:
    """An Estimator input function: a lambda, a ``functools.partial(...)``, a name like
    ``train_input_fn`` or what a builder like ``make_input_fn(df)`` returns."""
    if isinstance(node, ast.Lambda):
        return True
    if isinstance(node, ast.Call):
        return last_name(node.func) == "partial" or bool(_INPUT_FN_NAME.search(last_name(node.func) or ""))
    return bool(_INPUT_FN_NAME.search(last_name(node) or ""))


#: Library functions that run a whole evaluation loop: their task label.
_EVALUATION_FUNCTIONS = {
    "detectron2.evaluation.inference_on_dataset": "inference_on_dataset",
    "detectron2.evaluation.evaluator.inference_on_dataset": "inference_on_dataset",
}


def eval_call(call: ast.Call, trained: Iterable[str], imports: ImportTable) -> Optional[str]:
    """The task label when ``call`` evaluates inside a library, or ``None``: the method name of Keras
    ``model.evaluate/predict``, Lightning ``trainer.validate/test/predict``, Hugging Face
    ``trainer.evaluate/predict``, detectron2's ``Trainer.test(...)``; detectron2's
    ``inference_on_dataset(model, loader, evaluator)``.

    The object must be one the file trains with a library call (``trained``
    holds those receivers: ``model`` of ``model.fit(...)``) or be named like a
    trainer: ``evaluate`` alone names too many things (a metric, an
    evaluator of one's own) to be taken on its name.
    """
    func = call.func
    function = _EVALUATION_FUNCTIONS.get(imports.resolve(func) or "")
    if function is not None:
        return function
    if not isinstance(func, ast.Attribute) or func.attr not in LIBRARY_EVALUATION:
        return None
    receiver = dotted(func.value)
    if receiver is None:
        return None
    if receiver in trained or _TRAINER_NAME.search(receiver.rsplit(".", 1)[-1]):
        return func.attr
    return None


def first(reasons: Iterable[Optional[str]]) -> Optional[str]:
    """The first reason given, if any."""
    return next((reason for reason in reasons if reason), None)


def _called(node: ast.AST, imports: ImportTable) -> str:
    """What ``node`` names, or calls when it is a call (``@torch.no_grad()`` -> ``torch.no_grad``), resolved."""
    return imports.resolve(node.func if isinstance(node, ast.Call) else node) or ""


def compile_decorator(decorator: ast.AST, imports: ImportTable) -> Optional[str]:
    """``@tf.function``-style text when ``decorator`` compiles or traces the function."""
    resolved = _called(decorator, imports)
    if resolved == "functools.partial" and isinstance(decorator, ast.Call) and decorator.args:
        return compile_decorator(decorator.args[0], imports)
    return _COMPILE_DECORATORS.get(resolved)


def grad_disabled(context: ast.AST, imports: ImportTable) -> Optional[str]:
    """``torch.no_grad()``-style text when a ``with`` item turns gradients off."""
    resolved = _called(context, imports)
    if resolved in _NO_GRAD_CONTEXTS:
        return _NO_GRAD_CONTEXTS[resolved]
    if resolved == "torch.set_grad_enabled" and isinstance(context, ast.Call) and context.args:
        arg = context.args[0]
        if isinstance(arg, ast.Constant) and arg.value is False:
            return "torch.set_grad_enabled(False)"
    return None


def mode_switch(call: ast.Call) -> Optional[str]:
    """``"eval"``/``"train"`` for ``model.eval()``/``model.train()`` statements."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("eval", "train") and not call.args and not call.keywords:
        return func.attr
    return None


def is_forward_call(call: ast.Call) -> bool:
    """True for a call that may run a model (anything but plain bookkeeping)."""
    name = last_name(call.func)
    return name is not None and name not in _NOT_FORWARD


def names_epochs(loop: ast.AST) -> Optional[str]:
    """Why a ``for``/``while`` header looks like it iterates over epochs."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        parts = [loop.target, loop.iter]
    elif isinstance(loop, ast.While):
        parts = [loop.test]
    else:
        return None
    for part in parts:
        for node in ast.walk(part):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name and _EPOCH_NAME.search(name) and not _PER_EPOCH.search(name):
                return f"iterates over epochs ({name})"
    return None


def eval_function_name(name: str) -> bool:
    return bool(_EVAL_FUNCTION.search(name))
