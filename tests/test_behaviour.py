"""An instrumented copy behaves like the original: same output, same exit code.

Each sample and harder test input runs twice with fixed seeds, as written and
as instrumented, with the real ittapi and torch/TensorFlow on the CPU and no
collector attached (INTEL_LIBITTNOTIFY64 unset).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import SCRIPTS, script_id
from transforms import Mode, instrument_source

pytestmark = pytest.mark.slow


def _run(script, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTEL_LIBITTNOTIFY")}
    return subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("torch_ops", ["all", "sampled"])
@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_instrumented_copy_prints_the_same_output(script, torch_ops, tmp_path):
    original = tmp_path / script.name
    shutil.copy(script, original)
    copy = tmp_path / f"{script.stem}_itt.py"
    copy.write_bytes(instrument_source(script.read_bytes(), script.name, Mode(torch_ops=torch_ops)).output)

    expected = _run(original, tmp_path)
    actual = _run(copy, tmp_path)

    assert expected.returncode == 0, expected.stderr[-2000:]
    assert actual.returncode == expected.returncode, actual.stderr[-2000:]
    assert actual.stdout == expected.stdout
    assert "Traceback" not in actual.stderr
    assert len(expected.stdout.splitlines()) >= 2  # the script really printed its losses
