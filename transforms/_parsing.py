"""Turning a script's bytes into text and an ``ast`` tree, with errors that name the line.

Detection works on Python's own ``ast`` (fast, exact line numbers); the lossless
rewrite parses the same bytes with libcst later, and only when there is
something to insert.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Optional

from ._errors import SourceError


@dataclass(frozen=True)
class Source:
    """A parsed script: its original bytes, decoded text and ``ast`` tree."""

    name: str
    data: bytes
    text: str
    encoding: str
    tree: ast.Module

    @property
    def lines(self) -> list:
        """The source lines as Python numbers them: split at \\n, \\r\\n and \\r only.

        (``str.splitlines`` also splits at form feeds and Unicode separators,
        which would shift every later line number.)
        """
        return _NEWLINE.split(self.text)


_NEWLINE = re.compile(r"\r\n|\r|\n")
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _cookie_line(data: bytes) -> Optional[int]:
    """The line (1 or 2) of a PEP 263 coding declaration, if there is one."""
    for number, line in enumerate(data.splitlines()[:2], start=1):
        if _COOKIE.match(line):
            return number
    return None


def parse_source(data: bytes, name: str) -> Source:
    """Decode ``data`` as Python does (BOM, coding cookie, else UTF-8) and parse it.

    Raises :class:`SourceError` for undecodable bytes, a bad coding cookie,
    NUL bytes or a syntax error, naming the line where there is one.
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        cookie = _cookie_line(data)
        if cookie is not None:
            raise SourceError(name, f"bad encoding declaration: {exc.msg}", cookie) from None
        # detect_encoding also fails on undecodable bytes in the first two
        # lines; decoding below names the line and byte.
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SourceError(
            name,
            f"not valid {encoding} text (byte 0x{data[exc.start]:02x}); "
            "is this a Python script? Declare its encoding with a '# -*- coding: ... -*-' line",
            line,
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise SourceError(name, "contains NUL bytes: not a Python source file", line)
    try:
        tree = ast.parse(data, filename=name, type_comments=False)
    except SyntaxError as exc:
        raise SourceError(name, f"syntax error: {exc.msg}", exc.lineno) from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise SourceError(name, f"cannot parse: {exc}") from None
    return Source(name=name, data=data, text=text, encoding=encoding, tree=tree)
