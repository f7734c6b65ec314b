"""scripts/debian_python.sh, the version matrix's interpreters: what it says when it cannot give one.

A successful set-up is what the version matrix itself runs on (scripts/version_matrix.sh, the end of `make
test`); these are its failures, which must be clear and must not touch the system's apt.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "debian_python.sh"
pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None, reason="Debian's apt-get is not on this machine")


def run(tmp_path, *args, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOITT_PYTHONS": str(tmp_path / "pythons"), **env})


@pytest.mark.slow
def test_an_unreachable_registry_exits_2_saying_which_mirror(tmp_path):
    done = run(tmp_path, "3.14", AUTOITT_DEBIAN_MIRROR="http://127.0.0.1:9/debian")
    assert done.returncode == 2 and done.stdout == ""
    assert "could not read Debian's package lists from http://127.0.0.1:9/debian" in done.stderr


def test_a_version_that_is_not_one_exits_2_before_any_download(tmp_path):
    done = run(tmp_path, "3.x")
    assert done.returncode == 2 and "'3.x' is not a version like 3.14" in done.stderr
    assert not (tmp_path / "pythons").exists()
