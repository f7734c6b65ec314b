"""Shared paths and helpers for the test suite."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import sys
import types
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Set by the version matrix (scripts/version_matrix.sh), which runs the suite against autoitt installed from its
#: wheel: then the checkout is taken off sys.path (where ``python -m pytest`` in it put it), so that
#: ``instrumenter`` and ``transforms`` are the installed ones; test_install.py checks it.
INSTALLED = os.environ.get("AUTOITT_SUITE_INSTALLED") == "1"
if INSTALLED:
    sys.path[:] = [entry for entry in sys.path if Path(entry or os.curdir).resolve() != ROOT]
if "tests" not in sys.modules:
    # ``tests`` is this folder, whatever is on sys.path (a package in site-packages may be named tests too)
    sys.modules["tests"] = types.ModuleType("tests")
    sys.modules["tests"].__path__ = [str(ROOT / "tests")]
# xdist's workers set COLUMNS=80 and LINES=24 (the controller's terminal), and autoitt takes a pipe's width from
# COLUMNS: the suite's commands print as into a CI log, 120 columns, unless a test gives COLUMNS itself
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
SAMPLES = ROOT / "samples"
INPUTS = ROOT / "tests" / "inputs"
GOLDEN = ROOT / "tests" / "golden"

#: Every script with a checked-in expected copy: the user-facing samples and the harder shapes.
SCRIPTS = sorted(SAMPLES.glob("*.py")) + sorted(INPUTS.glob("*.py"))
SCRIPTS = [p for p in SCRIPTS if not p.stem.endswith("_itt")]


def script_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.fixture
def python() -> str:
    return sys.executable


def free_port() -> int:
    """A TCP port free on loopback now, for a run's rendezvous: launchers default to one port (29500), and two tests
    of ranks running at once in other xdist workers would meet in it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# TensorFlow, then triton (which torch's default build loads with its compiler: an optimizer's construction imports
# torch._dynamo) in one process crashes at import, without autoitt: `python -c "import tensorflow; import triton"`
# segfaults on CPython 3.13 with tensorflow-cpu 2.21 and triton 3.7.1; the other order runs. The in-process tests
# import both, in whatever order xdist hands them to a worker, so triton comes first.
if importlib.util.find_spec("triton") is not None and importlib.util.find_spec("tensorflow") is not None:
    import triton  # noqa: F401


# --------------------------------------------------------------------------- frameworks a test runs

#: The frameworks tests run scripts with, all in the test extra. The version matrix (scripts/version_matrix.sh)
#: installs that extra on each version too, where a framework may have no wheel (README's version table): its
#: tests skip there. AUTOITT_TESTS_WITHOUT (comma-separated names) has the suite take those as not
#: installed, to see on 3.11 what the matrix skips (tests/test_framework_skips.py).
FRAMEWORKS = ("torch", "tensorflow", "keras", "pytorch_lightning", "lightning", "transformers", "accelerate", "ignite",
              "jax", "optax", "flax", "deepspeed", "stable_baselines3", "trl")
_WITHOUT = set(filter(None, os.environ.get("AUTOITT_TESTS_WITHOUT", "").split(",")))
_MISSING = [name for name in FRAMEWORKS if name in _WITHOUT or importlib.util.find_spec(name) is None]
_USES = re.compile(r"\b(?:import|from)\s+(%s)\b" % "|".join(_MISSING)) if _MISSING else None


#: What starts a script (or Python in a subprocess): the autoitt commands that run one, the suite's runners.
_RUNS = re.compile(r"\"(?:profile|run)\"|\b(?:subprocess|run_target|run_once|sys\.executable)\b")

_SUITE = ROOT / "tests"


def _source(thing) -> str:
    """A function's source without its decorators: a parameter list naming "profile" or a script runs nothing
    by itself (each of the parameters is looked at on its own)."""
    try:
        source = inspect.getsource(thing)
    except (OSError, TypeError):
        return ""
    return source.split("\ndef ", 1)[-1] if source.startswith("@") else source


def _text_of(value) -> Optional[str]:
    """A value as the code it may hand to Python: a string, bytes, or a file's text; None for anything else."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, Path) and value.is_file():
        return value.read_text(errors="replace")
    return None


def _suite_function(value) -> bool:
    """A function written in tests/: a test module's, conftest's or a helper module's."""
    return inspect.isfunction(value) and Path(value.__code__.co_filename).resolve().parent == _SUITE


def _code_through(functions) -> List[Tuple[str, dict]]:
    """(source, the namespace its names mean something in) of each function and, transitively, of every function
    of the suite's it calls: a helper imported from another test module (test_exec.py profiling through
    test_processes' _profile) is read as one of the test module's own is, in its own module."""
    seen, found, todo = set(), [], [getattr(f, "__func__", f) for f in functions]
    while todo:
        function = todo.pop()
        if function in seen:
            continue
        seen.add(function)
        source = _source(function)
        found.append((source, function.__globals__))
        # called by name: a word of a string or comment ("# autoitt: ...") calls nothing
        todo += [value for value in map(function.__globals__.get, set(re.findall(r"\b(\w+)\s*\(", source)))
                 if _suite_function(value)]
    return found


def _what_it_runs(item) -> Tuple[str, str]:
    """The test's own code (its source, its fixtures' sources, and those of the suite's functions they call, in
    any test or helper module), and the code it hands to Python: the strings and files that code names (a script,
    a notebook; looked up where the code is written), and the files or scenarios its parameters name."""
    module = vars(item.module)
    fixtures = [definition.func for name in item.fixturenames
                for definition in item._fixtureinfo.name2fixturedefs.get(name, ())]
    pieces = _code_through([item.function, *fixtures])
    text = "\n".join(source for source, _ in pieces)
    given = []
    for source, namespace in pieces:
        given += [namespace.get(name) for name in set(re.findall(r"\b\w+\b", source))]
        for owner, name in set(re.findall(r"\b(\w+)\.([A-Z_][A-Z0-9_]+)\b", source)):  # a helper module's script
            if inspect.ismodule(namespace.get(owner)):
                given.append(getattr(namespace[owner], name, None))
    given += [folder / literal for literal in set(re.findall(r"[\"'](\w+\.(?:py|ipynb))[\"']", text))
              for folder in (SAMPLES, INPUTS)]
    for value in getattr(getattr(item, "callspec", None), "params", {}).values():
        given.append(value)
        if isinstance(value, str):  # also a scenario's name, looked up in the tables of the module and its helpers
            helpers = [vars(m) for m in module.values() if inspect.ismodule(m) and m.__name__.startswith(("autoitt", "tests"))]
            for entry in (table[value] for where in (module, *helpers) for table in where.values()
                          if isinstance(table, dict) and value in table):
                given += vars(entry).values() if hasattr(entry, "__dict__") else [entry]
    return text, "\n".join(filter(None, map(_text_of, given)))


def pytest_collection_modifyitems(config, items):
    """Where a framework is not installed, the tests that run code importing it are skipped, saying which: a test
    that runs torch cannot pass without it, and the rest of the suite still runs on every Python version."""
    if _USES is None:
        return
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        own, given = _what_it_runs(item)
        found = sorted(set(_USES.findall(own + "\n" + given)))
        # only a test that runs the code needs the framework: instrumenting, stripping or detecting reads it as text
        if found and _RUNS.search(own):
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(found)}, not installed for this Python"))
