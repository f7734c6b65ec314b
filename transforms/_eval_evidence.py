"""What says a loop evaluates a model: its forward passes and the data it iterates over.

A loop in an evaluation context (gradients off, after ``model.eval()``, in an
eval-like function, ...) is an *eval* only when it iterates over data and runs
a forward pass: a metrics reset, a loop over top-k values, a file clean-up or
an ``input()`` prompt in ``evaluate()`` is not one. Like
:mod:`transforms._evidence`, each recogniser looks at one ``ast`` node and
returns a short human reason (shown by ``autoitt loops``) or ``None``;
following same-file calls is :mod:`transforms._roles`' job.
"""

from __future__ import annotations

import ast
import re
from typing import AbstractSet, Iterable, Iterator, Mapping, Optional

from ._aliases import Alias
from ._evidence import is_forward_call
from ._names import NamePattern, dotted, last_name

# A name that holds a model: model, ema_model, model_g, model2, encoder_q, lm_head, pipe, cnn, bert,
# model_engine (DeepSpeed's engine, called as its model is) ...
_MODEL_NAME = NamePattern(
    r"^(?:.*_)?(?:model|module|network|encoder|decoder|generator|discriminator|classifier|critic|actor"
    r"|policy|agent|backbone|head|transformer|predictor|pipeline|pipe|teacher|student|ensemble|lm|llm|vae"
    r"|autoencoder|cnn|mlp|rnn|lstm|gru|vit|bert|gpt|engine)"
    r"(?:_[a-z]{1,3}|\d+)?$",
    re.I,
)
# ... or a network: net, self.net, netG, net_d, resnet, unet, convnet2, mymodel (case matters: netG,
# not network_io).
_NET_NAME = NamePattern(r"^(?:[a-z]*|\w*_)(?:net|model)\d*$|^net(?:[A-Z]\w{0,2}|_[a-z]{1,3}|\d+)$")
# Methods that run a model on data, whatever the object is named (model.predict_step, net.forward).
_FORWARD_METHODS = frozenset(
    """forward predict predict_step test_step validation_step eval_step predict_on_batch test_on_batch
    generate apply_fn""".split()
)
# Methods that run a model when the object holds one (model.apply(params, x) in Flax, model.infer(x)).
_MODEL_METHODS = frozenset("apply call infer inference sample encode decode __call__".split())
# Functions whose call evaluates one batch: test_step, eval_step, val_step, validation_step,
# predict_step, evaluate_batch, eval_fn, p_eval_step (jax.pmap), ...
_EVAL_STEP_FUNCTION = NamePattern(
    r"^_*(?:(?:p|pmap|pmapped|jit|jitted|compiled|parallel)_)?"
    r"(?:test|val|valid|validation|eval|evaluate|evaluation|predict|prediction|infer|inference)"
    r"_?(?:step|batch|on_batch|fn|step_fn)$",
    re.I,
)
# Functions whose call runs a model, in training as well as in evaluation: a forward pass, but
# no sign of evaluating (a NumPy script's forward(x) feeds its own backward(...)).
_FORWARD_FUNCTIONS = frozenset("forward predict infer inference".split())
# Iterables that hold no data for a model: metrics, meters, callbacks, checkpoints, top-k
# values, and the model's own outputs (predictions, logits) that a helper post-processes.
# Files are not among them: a loop over image files that runs the model on each is inference,
# and a clean-up loop over files runs no model.
_NOT_DATA_NAME = NamePattern(
    r"(?:^|_)(?:metrics?|meters?|callbacks?|hooks?|ckpts?|checkpoints?|top_?k|ks"
    r"|preds?|predictions?|outputs?|logits|results?|scores?)(?:_|$)",
    re.I,
)
# Validation or test data: val_loader, test_dataset, valid_ds, eval_batches, dev_set, loader_val ...
_VALIDATION_DATA = NamePattern(
    r"^(?:val|valid|validation|test|testing|eval|evaluation|dev|holdout)_?"
    r"(?:loader|dataloader|data|dataset|ds|set|batches|iter|iterator|gen|generator|samples|split|stream)s?$"
    r"|^(?:loader|dataloader|data|dataset|ds|batches)_?(?:val|valid|validation|test|eval|dev)$",
    re.I,
)
# Calls that hand on the iterable they are given: enumerate(loader), tqdm(loader), zip(x, y) ...
_PASS_THROUGH = frozenset("enumerate zip tqdm iter list sorted reversed islice trange".split())


def forward_pass(call: ast.Call, models: AbstractSet[str]) -> Optional[str]:
    """``model()``-style text when ``call`` runs a model, or ``None``.

    A model is called (``model(x)``, ``self.net(x)``, ``self(x)`` in a
    LightningModule, or any name in ``models``: objects of the file's classes
    that define ``forward``/``call``), or runs through a method that only
    models have (``net.forward(x)``, ``model.predict_step(...)``,
    ``state.apply_fn(...)``), or the call is to an eval step (``test_step(x,
    y)``, ``p_eval_step(state, batch)``) or a ``forward(...)``/``predict(...)``
    function; TF1's ``sess.run(...)`` runs the graph. Bookkeeping calls
    (:func:`~transforms._evidence.is_forward_call`) never are.
    """
    if not is_forward_call(call):
        return None
    func = call.func
    name = dotted(func)
    if name is not None and _holds_a_model(name, models):
        return f"{name}()"
    if isinstance(func, ast.Attribute):
        receiver = dotted(func.value)
        if func.attr in _FORWARD_METHODS:
            return f"{name or '...' + func.attr}()"
        if func.attr in _MODEL_METHODS and receiver is not None and _holds_a_model(receiver, models):
            return f"{name}()"
        if func.attr == "run" and re.search(r"sess|session", last_name(func.value) or "", re.I):
            return f"{name}()"
    if eval_step_call(call) or (isinstance(func, ast.Name) and func.id in _FORWARD_FUNCTIONS):
        return f"{name}()"
    return None


def _holds_a_model(name: str, models: AbstractSet[str]) -> bool:
    if name in models or name == "self":
        return True
    last = name.rsplit(".", 1)[-1]
    if last[:1].isupper() and any(c.islower() for c in last):
        return False  # CamelCase: a class; calling it builds a model, it runs none
    return bool(_MODEL_NAME.match(last) or _NET_NAME.match(last))


def eval_step_call(call: ast.Call, aliases: Optional[Mapping[str, Alias]] = None) -> Optional[str]:
    """``test_step()``-style text when ``call`` is to a function named as an eval step (itself, or
    the function a name in ``aliases`` wraps: ``p_eval = jax.pmap(eval_step)``), or ``None``."""
    name = last_name(call.func)
    if name and _EVAL_STEP_FUNCTION.match(name):
        return f"{dotted(call.func) or name}()"
    alias = (aliases or {}).get(dotted(call.func) or "")
    if alias is not None and _EVAL_STEP_FUNCTION.match(last_name(alias.target) or ""):
        return f"{dotted(call.func)}() = {alias.shown}"
    return None


def not_data(loop: ast.AST, body_calls: Iterable[ast.Call]) -> Optional[str]:
    """Why a loop does not iterate over data a model evaluates, or ``None`` when it may.

    ``body_calls``: the calls its own body makes. Not data: a literal of
    constants (``for k in (1, 5)``), metrics, checkpoints, top-k values or
    predictions by name (``for metric in self.metrics``, ``for k in topk``),
    or a loop that prompts with ``input()``.
    """
    if any(isinstance(call.func, ast.Name) and call.func.id == "input" for call in body_calls):
        return "it reads input()"
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return None
    iterable = loop.iter
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(element, ast.Constant) for element in iterable.elts):
        return "it iterates over constants"
    for node in _iterated(iterable):
        name = last_name(node.func if isinstance(node, ast.Call) else node)
        if name and _NOT_DATA_NAME.search(name):
            return f"it iterates over {name}"
    return None


def validation_data(loop: ast.AST) -> Optional[str]:
    """The iterable's name when a ``for`` loop iterates over validation or test data (``val_loader``)."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return None
    for node in _iterated(loop.iter):
        name = last_name(node.func if isinstance(node, ast.Call) else node)
        if name and _VALIDATION_DATA.match(name):
            return dotted(node.func if isinstance(node, ast.Call) else node) or name
    return None


def _iterated(node: ast.AST) -> Iterator[ast.AST]:
    """What a loop header iterates: through ``enumerate(...)``, ``zip(...)``, ``tqdm(...)`` and
    ``.items()``/``.values()``/``.keys()`` to the names (or calls) underneath."""
    if isinstance(node, ast.Call):
        callee = last_name(node.func)
        if callee in _PASS_THROUGH:
            for arg in node.args:
                yield from _iterated(arg)
            return
        if isinstance(node.func, ast.Attribute) and callee in ("items", "values", "keys"):
            yield from _iterated(node.func.value)
            return
    yield node


# Names of a recurrent state or cache the model hands back to itself over data (an RNN's hidden state,
# a transformer's past key/values): feeding them back is not generating.
_CARRIED_STATE = NamePattern(r"hidden|state|mems?$|memory|cache|past|carry|^h$|^c$", re.I)
# Calls that fetch a batch of data: a loop making one evaluates data, however it counts.
_FETCHES_DATA = NamePattern(r"batch|^next$|load|data", re.I)


def generation(loop: ast.AST, forward_calls: Iterable[ast.Call], body_calls: Iterable[ast.Call]) -> Optional[str]:
    """Why a loop generates or samples (runs the model step by step on its own output) rather than
    evaluating data, or ``None``.

    A ``while`` loop, or a ``for`` over a count (``range(T)``, ``reversed(range(T))``), that fetches no
    batch and feeds what a model call returned back into a model call: a diffusion model's
    ``x = model(x, t)``, a language model's ``idx = torch.cat((idx, logits.argmax(-1)))``. A
    recurrent state handed back (``out, hidden = model(x, hidden)``) is not output fed back.
    """
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        if not any(isinstance(node, ast.Call) and last_name(node.func) in ("range", "trange")
                   for node in _iterated(loop.iter)):
            return None
    elif not isinstance(loop, ast.While):
        return None
    if any(_FETCHES_DATA.search(last_name(call.func) or "") for call in body_calls):
        return None
    forward = list(forward_calls)
    from_model = {id(call) for call in forward}
    assignments = [node for stmt in loop.body for node in ast.walk(stmt)
                   if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None]
    fed: set = set()
    grew = True
    while grew:  # the names a model's output reaches, through assignments in the body
        grew = False
        for node in assignments:
            if not any(id(n) in from_model or (isinstance(n, ast.Name) and n.id in fed) for n in ast.walk(node.value)):
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id not in fed and not _CARRIED_STATE.search(name.id):
                        fed.add(name.id)
                        grew = True
    for call in forward:
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            name = next((n.id for n in ast.walk(argument) if isinstance(n, ast.Name) and n.id in fed), None)
            if name:
                return (f"{dotted(call.func) or 'the model'}() runs on its own output ({name}): generation or "
                        "sampling step by step, not an evaluation over data")
    return None

