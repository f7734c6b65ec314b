"""The functions ``torch.compile`` compiled, told to the trace: what names a compiled graph's row.

Under ``emit_itt`` a compiled region runs as ``Torch-Compiled Region: 0/0``
(Dynamo's compile id: frame 0, its compile 0) around ``## Call CompiledFxGraph
<hash> ##``: neither names the function compiled. Dynamo keeps, for each
compile, the code it compiled (``torch._dynamo.utils.get_compilation_metrics()``:
``compile_id``, ``co_name``, ``co_filename``, ``co_firstlineno``). :func:`tell`
hands each new one to the trace as an ITT string handle whose text is
:data:`PREFIX` and JSON (:func:`text`, read back by :func:`parse`): the
collector records every string handle's text when it is made
(``collector/itt_binding.c``), used or not, and a handle costs nothing after.
The reader (``instrumenter/builtin/statistics/compiled.py``) pairs the graphs
with their regions and names each row by its function.

Called where the copies' runtime already runs Python: when an iteration that
recorded its operators ends (``torch_ops.OperatorToggle.end``), and when
the process's last training region ends (``collection.Collection.pause``).
Compiles happen in a region's first iteration, which records its operators.
A run killed before either leaves its graphs named by compile id only.

Dynamo's metrics are its own, not public API: whatever they hold or lack,
nothing here fails the program (each compile is told once, in a ``try``).
Standard library only; torch is taken from ``sys.modules``, never imported.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, Optional, Set, Tuple

from .guest import programs

#: The start of a string handle that tells a compile's function (the rest: :func:`text`'s JSON).
PREFIX = "autoitt.compiled "

_told: Set[str] = set()
_lock = threading.Lock()
#: the last metrics entry looked at: the deque is unchanged while its last entry is (no compile since)
_last: Any = None


def text(compile_id: str, name: str, filename: str, line: int) -> str:
    """A string handle's text for one compile: :data:`PREFIX` and ``[compile_id, name, filename, line]``."""
    return PREFIX + json.dumps([compile_id, name, filename, line])


def parse(handle: str) -> Optional[Tuple[str, str, str, int]]:
    """(compile id, function name, file, first line) from a string handle's text; None: not one of these."""
    if not handle.startswith(PREFIX):
        return None
    try:
        compile_id, name, filename, line = json.loads(handle[len(PREFIX):])
        return str(compile_id), str(name), str(filename), int(line)
    except (ValueError, TypeError):
        return None


def tell() -> None:
    """Make a string handle for each compile Dynamo has recorded since the last call (none: nothing)."""
    global _last
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return
    try:
        metrics = getattr(utils, "_compilation_metrics", None)
        if metrics is None or not len(metrics) or metrics[-1] is _last:
            return
        with _lock:
            for entry in list(metrics):
                compile_id = getattr(entry, "compile_id", None)
                filename = getattr(entry, "co_filename", None)
                if not compile_id or not filename or compile_id in _told:
                    continue
                _told.add(compile_id)
                _handle(text(str(compile_id), str(getattr(entry, "co_name", "") or "?"), str(filename),
                             int(getattr(entry, "co_firstlineno", 0) or 0)))
            _last = metrics[-1]
    except Exception as error:  # a guest: Dynamo's private metrics changed shape; the graphs keep their compile ids
        if programs(error):
            raise
        return


def _handle(name: str) -> None:
    import ittapi.native

    ittapi.native.StringHandle(name)
