"""What the names in a script refer to, as far as its own imports tell.

A deliberately small stand-in for libcst's ``QualifiedNameProvider``: scope
analysis of a whole file costs several times the parse, and detection only
needs to know that ``optim.SGD`` is ``torch.optim.SGD`` or ``tf.function`` is
``tensorflow.function``.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterable, Iterator, Optional


class NamePattern:
    """A regular expression over names, compiled when first used.

    Detection holds a dozen or so; compiling them all would cost a few
    milliseconds of every command's start-up, and one script uses only some.
    """

    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled: Optional[re.Pattern] = None

    def _regex(self) -> re.Pattern:
        if self._compiled is None:
            self._compiled = re.compile(self._pattern, self._flags)
        return self._compiled

    def match(self, name: str) -> Optional[re.Match]:
        return self._regex().match(name)

    def search(self, name: str) -> Optional[re.Match]:
        return self._regex().search(name)


def dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a chain of attribute accesses on a name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def last_name(node: ast.AST) -> Optional[str]:
    """The rightmost identifier of a name or attribute chain (``self.opt`` -> ``opt``)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


class ImportTable:
    """Maps each name bound by an import anywhere in the script to its module path."""

    def __init__(self, aliases: Dict[str, str]) -> None:
        self._aliases = aliases

    @classmethod
    def from_imports(cls, nodes: Iterable[ast.AST]) -> "ImportTable":
        """The table for these ``import``/``from ... import`` statements."""
        aliases: Dict[str, str] = {}
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        return cls(aliases)

    def resolve(self, node: ast.AST) -> Optional[str]:
        """The dotted name of ``node`` with its first part replaced by what it imports."""
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        target = self._aliases.get(head)
        if target is None:
            return name
        return f"{target}.{rest}" if rest else target

    def is_imported(self, node: ast.AST) -> bool:
        """True when ``node``'s dotted name starts with a name bound by an import."""
        name = dotted(node)
        return name is not None and name.split(".")[0] in self._aliases

    def imports(self, package: str) -> bool:
        """True when the script imports ``package`` or anything inside it."""
        return any(
            target == package or target.startswith(package + ".")
            for target in self._aliases.values()
        )

    def names_bound_to(self, module: str) -> Iterator[str]:
        """The local names under which ``module`` itself is imported."""
        for name, target in self._aliases.items():
            if target == module:
                yield name
