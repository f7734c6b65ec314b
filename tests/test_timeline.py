"""``trace.json`` of a long run: every task of the run's own markers, the others only in a window of steps."""

from __future__ import annotations

import json

import pytest

from instrumenter.builtin.taskstats import Interval
from instrumenter.builtin.timeline import AUTO_ALL_TASKS, StepWindow, window
from tests.test_profile import autoitt

DOMAIN = "autoitt.train"


def _run(steps, operators_per_step=2, pid=1):
    """Steps of 10 ns, each holding ``operators_per_step`` PyTorch operators."""
    items = []
    for i in range(steps):
        start = 100 * i
        items.append(Interval(pid, pid, DOMAIN, "step", start, start + 10, 0, 10, None))
        items.extend(Interval(pid, pid, "PyTorch", f"aten::op{k}", start + 1 + k, start + 2 + k, 1, 1, "step")
                     for k in range(operators_per_step))
    return items


def _kept_steps(kept):
    starts = {item.start // 100 + 1 for item in kept if item.domain == "PyTorch"}
    return sorted(starts)


def test_a_run_with_few_tasks_keeps_its_whole_timeline():
    items = _run(100)
    kept, note = window(items, ["step"], [DOMAIN], StepWindow.parse("auto"))
    assert kept == items and note is None


def test_a_chosen_window_keeps_every_step_and_the_operators_of_its_steps_only():
    items = _run(100)
    kept, note = window(items, ["step"], [DOMAIN], StepWindow.parse("2-4,50,-3"))
    assert _kept_steps(kept) == [2, 3, 4, 50, 98, 99, 100]
    assert sum(1 for item in kept if item.domain == DOMAIN) == 100  # the run's own tasks, all of them
    assert "steps 2-4, 50, the last 3 of 100: 186 tasks left out" in note


def test_auto_keeps_steps_after_warm_up_and_the_last_ones_for_a_long_run():
    steps = AUTO_ALL_TASKS // 3 + 10
    kept, note = window(_run(steps), ["step"], [DOMAIN], StepWindow.parse("auto"))
    assert _kept_steps(kept) == list(range(2, 12)) + list(range(steps - 9, steps + 1))
    assert f"steps 2-11, the last 10 of {steps}" in note


def test_all_keeps_everything():
    items = _run(10)
    assert window(items, ["step"], [DOMAIN], StepWindow.parse("all")) == (items, None)


def test_each_process_counts_its_own_steps():
    items = _run(10, pid=1) + _run(10, pid=2)
    kept, _ = window(items, ["step"], [DOMAIN], StepWindow.parse("1"))
    assert sorted({(item.pid, item.start // 100 + 1) for item in kept if item.domain == "PyTorch"}) == [(1, 1), (2, 1)]


@pytest.mark.parametrize("bad", ["x", "3-1", "0", "-0", "1-", ""])
def test_a_bad_window_is_refused(bad):
    with pytest.raises(ValueError):
        StepWindow.parse(bad)


@pytest.mark.slow
def test_report_can_rewrite_the_timeline_for_another_window(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 1)\nfor i in range(30):  # autoitt: step\n"
        "    model(torch.ones(2))\n")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "--trace-steps", "2-3", "train.py",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "steps 2-3 of 30" in json.loads(done.stdout)["trace_window"]
    narrow = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert "steps 2-3 of 30" in narrow["otherData"]["window"]
    again = autoitt("report", "--json", "--trace-steps", "all", "out", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["trace_window"] is None
    wide = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert len(wide["traceEvents"]) > len(narrow["traceEvents"])
