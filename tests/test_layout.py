"""The package layout the README's Layout section describes: small modules, imports that flow one way.

Read from the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

from tests.conftest import ROOT

PACKAGES = ("transforms", "instrumenter")
MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
MAX_LINES = 450


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Set[str]:
    """The project modules ``path`` imports (at any depth: lazily, or for type checking, alike).

    ``from pkg import name`` depends on the module ``pkg.name`` when there is
    one, else on ``pkg`` itself (its ``__init__``).
    """
    name = _name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = {_name(p) for p in MODULES}
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
    return {m for m in found if m in known and m != name}


def _graph() -> Dict[str, Set[str]]:
    return {_name(path): _imports(path) for path in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_longer_than_the_layout_allows(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def _cycle(edges: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle of the graph, as the modules along it, or None."""
    state: Dict[str, int] = {}

    def visit(module: str, path: List[str]) -> Optional[List[str]]:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                return [*path, module, target]
            if target not in state:
                found = visit(target, [*path, module])
                if found:
                    return found
        state[module] = 2
        return None

    return next((found for module in sorted(edges) if module not in state
                 for found in [visit(module, [])] if found), None)


def test_the_project_modules_import_each_other_without_cycles():
    assert _cycle(_graph()) is None


def test_a_cycle_through_a_package_init_is_found(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from pkg import B\nA = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "MODULES", sorted(package.rglob("*.py")))
    assert _cycle(_graph()) == ["pkg", "pkg.a", "pkg"]


def test_transforms_never_imports_the_application():
    assert not {m for module, imports in _graph().items() if module.startswith("transforms")
                for m in imports if m.startswith("instrumenter")}


#: What runs inside the user's process, and what each may import besides the standard library.
IN_THE_USERS_PROCESS = {
    # loaded by path: nothing of autoitt's, not even relatively; ittapi, which the copy's header imports, found
    # before the script's folder heads sys.path
    "instrumenter/launch/__main__.py": {"ittapi"},
    "instrumenter/launch/copies.py": set(),  # loaded by path by __main__.py
    "instrumenter/launch/site/sitecustomize.py": set(),
    "instrumenter/runtime/__init__.py": set(),
    "instrumenter/runtime/collection.py": {"ittapi", "instrumenter.runtime.libraries", "instrumenter.runtime.closures",
                                           "instrumenter.runtime.torch_ops", "instrumenter.runtime.extensions",
                                           "instrumenter.runtime.compiled"},
    # torch is found in sys.modules (the script imported it), never imported; the closure hook while recording,
    # and the compiles told after an iteration that recorded
    "instrumenter/runtime/torch_ops.py": {"instrumenter.runtime.closures", "instrumenter.runtime.compiled",
                                          "instrumenter.runtime.guest"},
    # Dynamo's metrics found in sys.modules; the string handles made through ittapi
    "instrumenter/runtime/compiled.py": {"ittapi", "instrumenter.runtime.guest"},
    # autoitt's own C modules (_around, _markers), loaded by their path, and handed the rule of whose an error is
    "instrumenter/runtime/extensions.py": {"instrumenter.runtime.guest"},
    # whose an error is: the standard library only
    "instrumenter/runtime/guest.py": set(),
    "instrumenter/runtime/window.py": {"ittapi", "instrumenter.runtime.collection", "instrumenter.runtime.libraries",
                                       "instrumenter.runtime.closures"},
    # torch is found in sys.modules, never imported; autoitt's own C wrapper (_around) is loaded by its path
    "instrumenter/runtime/closures.py": {"instrumenter.runtime.extensions", "instrumenter.runtime.guest"},
    # the frameworks it imports are named by the object's class (already imported), never by name here; the C
    # wrappers that leave no frame come through closures (relatively: _autoitt.closures in a copy's process)
    "instrumenter/runtime/libraries.py": {"instrumenter.runtime.closures"},
    # the names copies made before the runtime had its own package import: the runtime's modules themselves
    "instrumenter/collection.py": {"instrumenter.runtime", "instrumenter.runtime.collection"},
    "instrumenter/window.py": {"instrumenter.runtime", "instrumenter.runtime.window"},
    "instrumenter/__init__.py": set(),
}


@pytest.mark.parametrize("module", list(IN_THE_USERS_PROCESS))
def test_what_runs_inside_the_users_process_imports_only_the_standard_library(module):
    path = ROOT / module
    allowed = IN_THE_USERS_PROCESS[module]
    imported = {alias.name for node in ast.walk(ast.parse(path.read_bytes())) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= _imports(path) | {node.module for node in ast.walk(ast.parse(path.read_bytes()))
                                  if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    foreign = {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names
               and name != "__future__" and name not in allowed and name.split(".")[0] not in allowed}
    assert not foreign
