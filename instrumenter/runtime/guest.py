"""Whose an error is: the one rule every line of autoitt that runs in the program's process keeps.

autoitt's runtime swallows its own errors (a marker that fails must never change what the program does) and
never the program's. An error caught in autoitt's code is the program's when:

- it is not an ``Exception``: KeyboardInterrupt (Ctrl-C), SystemExit (``sys.exit``, a SIGTERM handler that
  exits), GeneratorExit. They derive from ``BaseException`` so that ``except Exception`` lets them through
  (docs.python.org, library/exceptions);
- or a signal handler of the program raised it. Python runs a handler between two bytecodes of whatever the
  main thread runs next, autoitt's runtime included, and what it raises appears there (docs.python.org,
  library/signal, "Note on Signal Handlers and Exceptions"): a ``Timeout(Exception)`` from a SIGALRM handler
  can surface inside a marker. The handler's frame is then in the error's traceback.

Python sites write ``except Exception as error: if programs(error): raise``; the C callbacks
(``markers.c``, ``around.c``) keep the same rule through ``guest.h``, which calls :func:`programs`.
"""

from __future__ import annotations

import signal
from types import CodeType
from typing import Any, Optional, Set

__all__ = ["programs"]


def programs(error: BaseException) -> bool:
    """Whether ``error``, caught in autoitt's runtime, belongs to the program (re-raise it) rather than to
    autoitt (swallow it)."""
    if not isinstance(error, Exception):
        return True
    handlers = _handler_codes()
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code in handlers:
            return True
        traceback = traceback.tb_next
    return False


def _handler_codes() -> Set[CodeType]:
    """The code of each Python signal handler installed now (read only when an error was caught: it is rare)."""
    codes = set()
    for number in signal.valid_signals():
        try:
            code = _code(signal.getsignal(number))
        except (ValueError, OSError, RuntimeError):  # a number this platform will not name
            continue
        if code is not None:
            codes.add(code)
    return codes


def _code(handler: Any) -> Optional[CodeType]:
    """The code object a handler runs: a function's, a method's, a partial's function's, or a callable's
    ``__call__``'s; None for SIG_DFL, SIG_IGN, None (a handler not set from Python) and builtins."""
    for _ in range(4):  # partial(method) and the like: a few layers at most
        code = getattr(handler, "__code__", None)
        if isinstance(code, CodeType):
            return code
        inner = getattr(handler, "__func__", None) or getattr(handler, "func", None)
        if inner is None and callable(handler) and not isinstance(handler, (int, type)):
            inner = getattr(type(handler), "__call__", None)
            if inner is getattr(object, "__call__", None):
                return None
        if inner is None or inner is handler:
            return None
        handler = inner
    return None
