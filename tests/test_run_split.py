"""Where the run went: before training, collected, between collection windows, after the last pause."""

from __future__ import annotations

import json

import pytest

from tests.test_profile import autoitt

SCRIPT = """\
import time
time.sleep(1.0)  # start-up and data preparation
x = 0
for i in range(5):  # autoitt: step
    time.sleep(0.02)
time.sleep(0.5)  # saving, a final evaluation
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("split")
    (work / "train.py").write_text(SCRIPT)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout), autoitt("report", "out", cwd=work)


@pytest.mark.slow
def test_the_parts_of_the_run_add_up_to_its_elapsed_time(run):
    summary, _ = run
    split = summary["run_split"]
    assert split["before_s"] >= 1.0 and split["after_s"] >= 0.5 and 0.1 <= split["collected_s"] < 0.5
    assert sum(split.values()) == pytest.approx(summary["elapsed_s"], rel=0.02)


@pytest.mark.slow
def test_a_run_mostly_before_training_says_so(run):
    _, report = run
    assert report.returncode == 0, report.stderr
    assert "of the run is before training starts" in report.stdout
