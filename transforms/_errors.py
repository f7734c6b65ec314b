"""The two ways instrumenting can fail: the user's input, or autoitt itself."""

from __future__ import annotations

from typing import Optional


class SourceError(Exception):
    """The input is not a Python source file autoitt can read.

    ``line`` is 1-based when the problem has a place in the file.
    """

    def __init__(self, name: str, message: str, line: Optional[int] = None) -> None:
        self.name = name
        self.message = message
        self.line = line
        where = f"{name}:{line}" if line else name
        super().__init__(f"{where}: {message}")


class RewriteError(Exception):
    """The rewrite failed its own checks: an autoitt bug, never the user's."""
