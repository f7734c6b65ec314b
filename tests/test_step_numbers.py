"""With --skip-steps, the step statistics name the run's own step numbers."""

from __future__ import annotations

import json

import pytest

from tests.test_profile import autoitt


@pytest.mark.slow
def test_skipped_steps_shift_the_first_step_number(tmp_path):
    (tmp_path / "train.py").write_text("import time\nfor i in range(10):  # autoitt: step\n    time.sleep(0.001)\n")
    done = autoitt("profile", "--json", "--skip-steps", "3", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (step,) = json.loads(done.stdout)["steps"]
    assert (step["count"], step["first_step"]) == (7, 4)
    report = autoitt("report", "out", cwd=tmp_path)
    assert "counted from step 4, the first collected" in " ".join(report.stdout.split())
