"""How a copy is compiled and imported in the user's process: line maps, the main script's prologue, the copy
loader, the runtime package. Part of the launcher (see ``__main__.py``, which loads this file by its path, outside
``sys.modules``: nothing here is importable by the script).

Stdlib only: this module runs inside the user's training process.
"""

# Imported before the script runs: each is then the standard library's for the script too (see __main__.py).
import importlib.machinery
import json
import os
import re
import sys
import types

#: The name the prologue pops from sys.modules and calls (see _prologue).
PROLOGUE_MODULE = "_autoitt_main"
#: What the prologue says when it runs without the sitecustomize having prepared it.
NO_SITECUSTOMIZE = ("autoitt: this instrumented copy ran without autoitt's sitecustomize (python -E, -I or -S, or a "
                    "launcher that does not pass PYTHONPATH and the AUTOITT_ variables on to the script's process); "
                    "run the script's processes without those flags")
#: The package the copies import autoitt's runtime from (transforms' LAUNCHED_RUNTIME_PACKAGE): autoitt's own
#: runtime folder (``instrumenter/runtime``) under a name of autoitt's (see _provide_runtime).
RUNTIME_PACKAGE = "_autoitt"

_NEWLINE = re.compile(rb"\r\n|\r|\n")
_HERE = os.path.dirname(os.path.abspath(__file__))


class _Lines:
    """The ``line_map`` of one copy (see ``transforms.LineMap``), with both files' indentation.

    Maps a position in the copy to the same code in the original: the line,
    and the column less the indentation the rewrite added to that line.
    """

    def __init__(self, line_map: dict, copy: bytes, original: bytes) -> None:
        self.inserted = {int(c): int(o) for c, o in line_map["inserted"]}
        self.copy_indent = [_indent(line) for line in _NEWLINE.split(copy)]
        self.original_lines = _NEWLINE.split(original)
        self.lines = [0]  # copy line -> original line: an inserted one's own, else the next of the original
        shown = 0
        for number in range(1, int(line_map["copy_lines"]) + 1):
            if number in self.inserted:
                self.lines.append(self.inserted[number])
            else:
                shown += 1
                self.lines.append(shown)

    def line(self, copy_line: int) -> int:
        return self.lines[copy_line] if copy_line < len(self.lines) else copy_line

    def column(self, copy_line: int, column: int, end: bool) -> int:
        line = self.line(copy_line)
        original = self.original_lines[line - 1] if line <= len(self.original_lines) else b""
        if copy_line in self.inserted:  # autoitt's own line: the whole original line it is shown as
            return len(original) if end else _indent(original)
        shift = self.copy_indent[copy_line - 1] - _indent(original) if copy_line <= len(self.copy_indent) else 0
        return max(column - shift, 0)


def _indent(line: bytes) -> int:
    return len(line) - len(line.lstrip(b" \t\f"))


def _compile(copy_path: str, filename: str, lines: "_Lines | None", main: "str | None" = None):
    """The copy's code object, named ``filename``; with ``lines``, at the original's positions. ``main``:
    the main script's, with the prologue (``"prologue"``) or the prologue as a ``with`` around the body
    (``"with"``): see :func:`_prologue`."""
    with open(copy_path, "rb") as handle:
        data = handle.read()
    if lines is None and main is None:
        return compile(data, filename, "exec", dont_inherit=True)
    import ast

    tree = ast.parse(data, filename)
    if main is not None:
        _prologue(tree, ast, around=main == "with")
    if lines is None:
        return compile(tree, filename, "exec", dont_inherit=True)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) is None or getattr(node, "lineno", None) < 0:
            continue  # the prologue: no line
        if getattr(node, "end_lineno", None) is None:
            continue
        start = (lines.line(node.lineno), lines.column(node.lineno, node.col_offset, end=False))
        end = (lines.line(node.end_lineno), lines.column(node.end_lineno, node.end_col_offset, end=True))
        if end < start:  # a statement ending on a marker shown at its region's first line
            end = start
        (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset) = start, end
    return compile(tree, filename, "exec", dont_inherit=True)


def _prologue(tree, ast, around: bool) -> None:
    """``(sys.modules.pop('_autoitt_main', None) or sys.exit(NO_SITECUSTOMIZE))()`` first in the module, after
    its docstring and ``__future__`` imports; with ``around``, as ``with <that>:`` around the rest (a ``with`` is
    no scope: names, ``global`` and annotations stay the module's). Line -1: no line event, no traceback line."""
    body, at = tree.body, 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        at = 1
    while at < len(body) and isinstance(body[at], ast.ImportFrom) and body[at].module == "__future__":
        at += 1
    call = ast.parse(f"(__import__('sys').modules.pop({PROLOGUE_MODULE!r}, None) or "
                     f"__import__('sys').exit({NO_SITECUSTOMIZE!r}))()").body[0]
    for node in ast.walk(call):
        if hasattr(node, "lineno"):
            node.lineno = node.end_lineno = node.col_offset = node.end_col_offset = -1
    if around:  # (a script of a docstring alone still ends inside it: its exit code is written)
        rest = body[at:] or [ast.Pass(lineno=-1, end_lineno=-1, col_offset=-1, end_col_offset=-1)]
        call = ast.With(items=[ast.withitem(context_expr=call.value, optional_vars=None)], body=rest,
                        type_comment=None, lineno=-1, end_lineno=-1, col_offset=-1, end_col_offset=-1)
    tree.body = body[:at] + [call] + ([] if isinstance(call, ast.With) else body[at:])


class _Instrumentation:
    """What ``instrumentation.json`` says about each file: which copy runs for it, and its line map."""

    def __init__(self, path: str) -> None:
        with open(path) as handle:
            data = json.load(handle)
        self.path = os.path.abspath(path)
        self.files = {os.path.realpath(f["path"]): f for f in data["files"]}
        self.entry = data["files"][0]

    def lines_of(self, original: str, copy: str) -> "_Lines | None":
        record = self.files.get(os.path.realpath(original))
        if record is None or record["runs"] is None or not record["line_map"]["inserted"]:
            return None
        # A notebook's lines are those of its code cells' program, written beside the copy.
        with open(copy, "rb") as handle, open(record.get("program") or original, "rb") as source:
            return _Lines(record["line_map"], handle.read(), source.read())

    def program_of(self, original: str) -> "str | None":
        """A notebook's program (its code cells as Python): its code is compiled under that name, so tracebacks
        show the program's lines, never the notebook's JSON."""
        return self.files.get(os.path.realpath(original), {}).get("program")

    def copies(self) -> dict:
        """original -> copy, for the local modules that run from copies."""
        return {path: f["runs"] for path, f in list(self.files.items())[1:] if f["runs"] is not None}


class _CopyLoader(importlib.machinery.SourceFileLoader):
    """A local module's loader: Python's own ``SourceFileLoader`` whose code is the copy's, compiled under the
    original's name and lines. Python's ``exec_module`` runs it, so an error raised while the module is imported
    shows the frames Python shows for any import (importlib's are left out), and the module is left with a plain
    ``SourceFileLoader`` as ``__loader__``. ``get_code`` is this loader's: no bytecode is read or written, so a
    later plain run cannot pick up markers; ``__cached__`` is what Python names."""

    def __init__(self, name, path, copy, instrumentation) -> None:
        super().__init__(name, path)
        self.copy, self.instrumentation = copy, instrumentation

    def get_code(self, fullname):
        module = sys.modules.get(fullname)
        if module is not None and getattr(module, "__loader__", None) is self:
            plain = importlib.machinery.SourceFileLoader(fullname, self.path)
            module.__loader__ = plain
            if getattr(module, "__spec__", None) is not None and module.__spec__.loader is self:
                module.__spec__.loader = plain
        return _compile(self.copy, self.path, self.instrumentation.lines_of(self.path, self.copy))


class _CopyFinder:
    """Finds modules as usual, then swaps in the loader of their instrumented copy (a meta path finder)."""

    def __init__(self, instrumentation: _Instrumentation) -> None:
        self.instrumentation = instrumentation
        self.copies = instrumentation.copies()

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not spec.origin:
            return spec
        copy = self.copies.get(os.path.realpath(spec.origin))
        if copy is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _CopyLoader(name, spec.origin, copy, self.instrumentation)
        return spec

    def invalidate_caches(self) -> None:
        pass


def _provide_runtime() -> None:
    """autoitt's runtime as the package :data:`RUNTIME_PACKAGE`: a package module whose path is autoitt's own
    runtime folder (``instrumenter/runtime``), so ``_autoitt.collection`` is that folder's ``collection.py``,
    imported when a copy imports it (and its relative imports, ``.libraries``, stay inside ``_autoitt``). Neither the
    ``instrumenter`` package nor its ``__init__`` is imported: a package of the user's of that name stays
    theirs, and nothing of autoitt's runs before the copy asks for it."""
    folder = os.path.join(os.path.dirname(_HERE), "runtime")
    spec = importlib.machinery.ModuleSpec(RUNTIME_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [folder]
    package = types.ModuleType(RUNTIME_PACKAGE, "autoitt's runtime, imported by the instrumented copies")
    package.__spec__, package.__path__, package.__package__ = spec, [folder], RUNTIME_PACKAGE
    sys.modules[RUNTIME_PACKAGE] = package
