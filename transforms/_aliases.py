"""Names bound to a wrapped function: ``p_train_step = jax.pmap(train_step)``.

JAX, Flax, TensorFlow and PyTorch code often calls a training step under
another name: a compiled copy (``jax.jit``, ``jax.pmap``, ``tf.function``,
``torch.compile`` called on the function) or one with arguments filled in
(``functools.partial``). Calling such a name runs the function it wraps, so
detection follows it there (:meth:`transforms._index.Index.resolve`), and a
function compiled this way gets no markers, as ``@jax.jit`` would.
"""

from __future__ import annotations

import ast
from typing import Optional

from ._names import ImportTable, dotted

# Calls that return a function running the one they are given: name = jax.jit(train_step).
# The value says whether that function then runs compiled (or traced), so its loops get no markers.
_FUNCTION_WRAPPERS = {
    "jax.jit": "jax.jit",
    "jax.pmap": "jax.pmap",
    "jax.vmap": "jax.vmap",
    "flax.nnx.jit": "nnx.jit",
    "equinox.filter_jit": "eqx.filter_jit",
    "tensorflow.function": "tf.function",
    "torch.compile": "torch.compile",
    "torch.jit.script": "torch.jit.script",
    "torch.jit.trace": "torch.jit.trace",
    "functools.partial": None,
}


class Alias:
    """A name bound to a wrapped function: ``jit_step = jax.jit(train_step)``.

    ``target``: the wrapped function's expression (``train_step``);
    ``shown``: the binding as written, for reasons (``jax.jit(train_step)``);
    ``compiler``: ``jax.jit``-style text when the wrapper compiles or traces
    the function (``functools.partial`` does not), else ``None``. A plain
    class: making a dataclass costs about a millisecond at import.
    """

    __slots__ = ("target", "shown", "compiler")

    def __init__(self, target: ast.expr, shown: str, compiler: Optional[str]) -> None:
        self.target = target
        self.shown = shown
        self.compiler = compiler


def function_alias(value: ast.AST, imports: ImportTable) -> Optional[Alias]:
    """The :class:`Alias` a wrapper call makes (``jax.pmap(partial(train_step, ...))``), or ``None``."""
    if not isinstance(value, ast.Call) or not value.args:
        return None
    resolved = imports.resolve(value.func) or ""
    if resolved not in _FUNCTION_WRAPPERS:
        return None
    wrapped = value.args[0]
    inner = function_alias(wrapped, imports)
    compiler = _FUNCTION_WRAPPERS[resolved]
    wrapper = dotted(value.func) or resolved
    if inner is not None:
        return Alias(inner.target, f"{wrapper}({inner.shown})", compiler or inner.compiler)
    name = dotted(wrapped)
    if name is None:
        return None
    return Alias(wrapped, f"{wrapper}({name})", compiler)
