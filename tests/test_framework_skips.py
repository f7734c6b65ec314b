"""Where a framework is missing (the version matrix's Pythons have no torch), tests/conftest.py skips exactly the
tests that run it: also those that run it through a helper of another test module, and not those that only read a
torch script as text. Checked here on any Python by having the suite take torch as not installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from tests.conftest import ROOT

#: Profiles torch only through test_processes' _profile (its copy of that helper once hid torch from the skip).
THROUGH_A_HELPER = "tests/test_exec.py::test_the_steps_recorded_before_an_exec_are_kept"
#: Runs a script with no torch in it, in the same module as tests that run torch.
RUNS_NO_TORCH = "tests/test_processes.py::test_children_inherit_autoitts_site_folder_and_a_clean_child_runs_as_it_is"
#: Instruments the shared torch script (tests/scripts.py) without running it.
READS_TORCH = "tests/test_options.py::test_torch_scripts_get_emit_itt_and_the_training_range"


def _outcomes(*tests: str) -> dict:
    """Each test's outcome ("PASSED", "SKIPPED"...) by node id, in a run of the suite taking torch as not installed.
    Run from outside the checkout, as the version matrix runs the suite (a Python started in the checkout would
    import its packages, not the installed autoitt)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), *(str(ROOT / t) for t in tests)],
                          cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "AUTOITT_TESTS_WITHOUT": "torch"})
    # node ids are shown relative to the working directory: ../work/main/tests/test_exec.py::...
    return dict(re.findall(r"^\S*?\b(tests/\S+) (PASSED|FAILED|ERROR|SKIPPED)\b", done.stdout, re.M))


def test_a_test_running_torch_through_another_modules_helper_is_skipped_and_one_only_reading_it_runs():
    """One run of pytest for all three (each run costs seconds of collection)."""
    found = _outcomes(THROUGH_A_HELPER, RUNS_NO_TORCH, READS_TORCH)
    assert [found.get(f"{THROUGH_A_HELPER}[{case}]") for case in ("quiet", "marks-its-own", "without-sampling")] == [
        "SKIPPED"] * 3, found
    # the controls: the same run runs a test of the helper's module that runs no torch, and one reading torch's text
    assert (found.get(RUNS_NO_TORCH), found.get(READS_TORCH)) == ("PASSED", "PASSED"), found
