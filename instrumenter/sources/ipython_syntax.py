"""One notebook cell's IPython syntax as Python: line magics, cell magics, shell escapes, help.

``%time f()``, ``%%time``, ``!pip install x``, ``files = !ls`` and ``obj?``
are not Python. Where IPython is installed, a cell is translated the way
IPython itself runs it (``IPython.core.inputtransformer2.TransformerManager``:
``get_ipython().run_line_magic('time', 'f()')``, ...); without IPython each
such line becomes a no-op (``pass``, or ``files = None``), except that
``%time``/``%%time`` (and ``%%capture``) run their code untimed, and the
translation says so in a note.

The contract the notebook program (:mod:`instrumenter.sources.notebook`) builds on:
a :class:`Translation` is ``line_for_line`` when its code has exactly the
cell's lines, and every line it changed is one simple statement at the same
indentation as the cell's line. Only then can markers go inside the cell and
its magics be put back around them; any other translation (a cell magic, a
cell IPython dedents, a cell with a top-level ``await``) runs as translated
but gets no markers. One exception makes the most common cell magic line for
line: a ``%%time`` (or bare ``%%capture``) cell runs its body once, as
Python, so its first line becomes ``pass`` (the body untimed, with a note)
and a training loop under it can be marked.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from transforms._linemap import NEWLINE

#: A line the fallback reads as IPython syntax: a magic, a shell escape, ``x = !cmd``/``x = %magic``, ``?obj``.
_IPYTHON_LINE = re.compile(r"^(?P<indent>[ \t]*)(?:(?P<target>[\w.]+(?:\s*,\s*[\w.]+)*)\s*=\s*[!%]|[!%?])")
#: ``obj?`` / ``obj??``: IPython's help.
_HELP_LINE = re.compile(r"^(?P<indent>[ \t]*)[\w.]+\?{1,2}\s*$")


@dataclass(frozen=True)
class Translation:
    """The Python for one cell; ``error`` (with ``error_line``, of the cell) when it is not Python even so.

    ``changed``: the 0-based cell lines the translation changed (its magics),
    meaningful when ``line_for_line``. ``awaits``: ``code`` has a top-level
    ``await`` (IPython runs such a cell as a coroutine; Python compiles it only
    with ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``), so it is never line for line.
    ``notes``: what the reader should know (magics run as no-ops without IPython).
    """

    code: str
    line_for_line: bool
    changed: Tuple[int, ...] = ()
    error: Optional[str] = None
    error_line: Optional[int] = None
    notes: Tuple[str, ...] = ()
    awaits: bool = False


def lines_of(text: str) -> list:
    """``text`` split into lines with their line breaks, as Python numbers them."""
    parts, start = [], 0
    for match in NEWLINE.finditer(text):
        parts.append(text[start:match.end()])
        start = match.end()
    if start < len(text):
        parts.append(text[start:])
    return parts


@functools.lru_cache(maxsize=None)
def _transformer():
    """IPython's input transformer, or ``None`` when IPython is not installed (imported once, on first use)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return None
    return TransformerManager()


def ipython_available() -> bool:
    return _transformer() is not None


def translate(text: str, use_ipython: bool = True) -> Translation:
    """The Python IPython runs for cell ``text`` (which ends with a line break); see the module docstring."""
    transformer = _transformer() if use_ipython else None
    # IPython drops a cell's leading blank lines; they are kept here, so that each line stays where it was
    blank = re.match(r"(?:[ \t\f]*(?:\r\n|\r|\n))*", text).end()
    leading, rest = text[:blank], text[blank:]
    source, notes = _body_of_timed_cell(rest, len(lines_of(leading)))
    if transformer is not None:
        try:
            code = leading + transformer.transform_cell(source) if source else text
        except Exception as exc:  # noqa: BLE001 - IPython's transformer raises what its tokenizer raises
            return Translation(text, False, error=f"IPython cannot translate it: {exc}")
    else:
        code, more = _without_ipython(source)
        code = leading + code
        notes += more
    awaits = False
    try:
        # Compiled, not only parsed: `return` or `break` outside their blocks fail only here, as they do in IPython.
        compile(code, "<cell>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        awaits = _compiles_as_coroutine(code)
        if not awaits:
            return Translation(code, False, error=f"syntax error: {exc.msg}", error_line=exc.lineno, notes=notes)
    before, after = lines_of(text), lines_of(code)
    if len(before) == len(after):  # IPython empties a line of only whitespace: the cell's own line, for Python
        after = [a if a != b and not a.strip() and not b.strip() else b for a, b in zip(before, after)]
        code = "".join(after)
    changed = tuple(number for number, (a, b) in enumerate(zip(before, after)) if a != b)
    aligned = not awaits and len(before) == len(after) and all(_same_place(before[n], after[n]) for n in changed)
    return Translation(code, aligned, changed if aligned else (), notes=notes, awaits=awaits)


def _compiles_as_coroutine(code: str) -> bool:
    """``code`` is Python once a top-level ``await`` is allowed (as IPython's autoawait allows it)."""
    try:
        compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError:
        return False
    return True


#: Cell magics that run their body once, as Python, in the notebook's namespace: their body is the program.
_RUN_ONCE = {"%%time": "untimed", "%%capture": "with its output shown"}


def _body_of_timed_cell(text: str, above: int = 0) -> Tuple[str, Tuple[str, ...]]:
    """(``text`` with its first line ``pass`` when it is a bare ``%%time``/``%%capture``, the note), else
    (``text``, no note): the body can then take markers, which a ``run_cell_magic`` string could not.
    ``above``: the cell's blank lines before ``text``, for the note's line number."""
    lines = lines_of(text)
    magic = lines[0].strip() if lines else ""
    if magic not in _RUN_ONCE:
        return text, ()
    ending = lines[0][len(lines[0].rstrip("\r\n")):]
    note = (f"line {above + 1}: {magic} cell: its body is read as Python, so that its loops can be marked "
            f"(`autoitt profile` runs it {_RUN_ONCE[magic]})")
    return "".join([f"pass{ending}", *lines[1:]]), (note,)


def _same_place(line: str, translated: str) -> bool:
    """The translated line is one simple statement at the cell line's own indentation."""
    indent = _indent(line)
    if _indent(translated) != indent:
        return False
    try:
        body = ast.parse(translated.strip()).body
    except SyntaxError:
        return False
    return len(body) == 1 and not isinstance(body[0], (ast.For, ast.While, ast.If, ast.With, ast.Try,
                                                        ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


#: Magics whose code still runs without IPython, only not timed (or its output not captured).
_RUN_ANYWAY = {"%time": "untimed", "%%time": "untimed", "%%capture": "with its output shown"}
_INSTALL = "(pip install ipython to run it as IPython does)"


def _without_ipython(text: str) -> Tuple[str, Tuple[str, ...]]:
    """Every line of IPython syntax as a no-op, and a note per line (IPython is not installed)."""
    lines = lines_of(text)
    notes = []
    first = 0
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].split()[0]
        if magic not in _RUN_ANYWAY:
            return "".join(["pass\n", *("\n" for _ in lines[1:])]), (
                f"line 1: {magic} cell runs as a no-op without IPython {_INSTALL}",)
        lines[0] = "pass\n"
        notes.append(f"line 1: {magic} cell runs {_RUN_ANYWAY[magic]} without IPython {_INSTALL}")
        first = 1
    for number, line in enumerate(lines[first:], start=first):
        match = _IPYTHON_LINE.match(line) or _HELP_LINE.match(line)
        if match is None:
            continue
        ending = line[len(line.rstrip("\r\n")):]
        indent, target = match.group("indent"), match.groupdict().get("target")
        magic, _, code = line.strip().partition(" ")
        if magic in _RUN_ANYWAY and not target and code.strip():
            lines[number] = f"{indent}{code.strip()}{ending}"
            notes.append(f"line {number + 1}: {line.strip()!r} runs {_RUN_ANYWAY[magic]} without IPython {_INSTALL}")
            continue
        lines[number] = f"{indent}{f'{target} = None' if target else 'pass'}{ending}"
        notes.append(f"line {number + 1}: {line.strip()!r} runs as a no-op without IPython {_INSTALL}")
    return "".join(lines), tuple(notes)
