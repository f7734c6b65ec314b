"""Shared paths and helpers for the test suite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
