"""``trace.json`` of a long run: every task of the run's own markers, the others only in a window of steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instrumenter.builtin.statistics import timeline as timeline_module
from instrumenter.builtin.statistics.aggregate import aggregate
from instrumenter.builtin.statistics.timeline import StepWindow, keep_policy, timeline
from instrumenter.builtin.trace.events import Event
from instrumenter.builtin.trace.tracefile import ProcessTrace
from tests.test_profile import autoitt
from tests.trace_writer import event_scans
from tests.contexts import read_context

DOMAIN = "autoitt.train"


def _run(steps, operators_per_step=2, pid=1):
    """One process: steps of 10 ns, 100 ns apart, each holding ``operators_per_step`` PyTorch operators."""
    events = []
    for i in range(steps):
        start = 100 * i
        events.append(Event("begin", pid, pid, start, DOMAIN, "step"))
        for k in range(operators_per_step):
            events.append(Event("begin", pid, pid, start + 1 + k, "PyTorch", f"aten::op{k}"))
            events.append(Event("end", pid, pid, start + 2 + k, "PyTorch", None))
        events.append(Event("end", pid, pid, start + 10, DOMAIN, None))
    return ProcessTrace(path=Path(f"itt-{pid}.bin"), pid=pid, ppid=0, start_ns=0, wall_start_ns=0, events=events)


def _timeline(traces, spec):
    context = read_context(["step"], [DOMAIN], trace_steps=spec)
    first = aggregate(event_scans(traces), [DOMAIN], keep_policy(context.trace_steps), start_paused=False,
                      step_labels=["step"])
    kept, note = timeline(first, context)
    names = [first.groups[g] for g in kept.group.tolist()]
    return [(domain, name, pid, start) for (domain, name), pid, start in zip(names, kept.pid.tolist(),
                                                                           kept.start.tolist())], note


def _kept_steps(kept):
    return sorted({start // 100 + 1 for domain, _, _, start in kept if domain == "PyTorch"})


def test_a_run_with_few_tasks_keeps_its_whole_timeline():
    kept, note = _timeline([_run(100)], "auto")
    assert len(kept) == 300 and note is None


def test_a_chosen_window_keeps_every_step_and_the_operators_of_its_steps_only():
    kept, note = _timeline([_run(100)], "2-4,50,-3")
    assert _kept_steps(kept) == [2, 3, 4, 50, 98, 99, 100]
    assert sum(1 for domain, *_ in kept if domain == DOMAIN) == 100  # the run's own tasks, all of them
    assert "steps 2-4, 50, the last 3 of 100: 186 tasks left out" in note


def test_auto_keeps_steps_after_warm_up_and_the_last_ones_for_a_long_run(monkeypatch):
    monkeypatch.setattr(timeline_module, "AUTO_ALL_TASKS", 300)
    kept, note = _timeline([_run(110)], "auto")
    assert _kept_steps(kept) == list(range(2, 12)) + list(range(101, 111))
    assert "steps 2-11, the last 10 of 110" in note


def _huge_steps(steps, operators_per_step):
    """One process: steps of ``operators_per_step`` operators, 10 ns each, steps 10 ns apart."""
    events, t = [], 0
    for _ in range(steps):
        events.append(Event("begin", 1, 1, t, DOMAIN, "step"))
        for _k in range(operators_per_step):
            events.append(Event("begin", 1, 1, t + 1, "PyTorch", "aten::addmm"))
            events.append(Event("end", 1, 1, t + 9, "PyTorch", None))
            t += 10
        events.append(Event("end", 1, 1, t + 1, DOMAIN, None))
        t += 10
    return ProcessTrace(path=Path("itt-1.bin"), pid=1, ppid=0, start_ns=0, wall_start_ns=0, events=events)


def _operators_per_step(kept, operators_per_step):
    """Step ordinal (1-based) -> operators kept in it, for :func:`_huge_steps`."""
    found = {}
    for domain, _name, _pid, start in kept:
        if domain == "PyTorch":
            step = start // (10 * operators_per_step + 10) + 1
            found[step] = found.get(step, 0) + 1
    return found


def test_auto_keeps_whole_steps_past_warm_up_within_its_budget_for_a_few_huge_steps(monkeypatch):
    # LBFGS: four steps of thousands of operators each; the window's steps would hold them all
    monkeypatch.setattr(timeline_module, "AUTO_ALL_TASKS", 300)
    kept, note = _timeline([_huge_steps(4, 200)], "auto")
    assert _operators_per_step(kept, 200) == {2: 200, 3: 200}  # past warm-up first; a third would pass 300
    assert "steps 2-3 (whole steps while they held at most 300 tasks) of 4" in note


def test_a_single_step_over_the_budget_is_still_held_whole(monkeypatch):
    monkeypatch.setattr(timeline_module, "AUTO_ALL_TASKS", 300)
    kept, _note = _timeline([_huge_steps(3, 500)], "auto")
    assert _operators_per_step(kept, 500) == {2: 500}


def test_the_budget_holds_whole_steps_of_a_long_run_too(monkeypatch):
    monkeypatch.setattr(timeline_module, "AUTO_ALL_TASKS", 300)
    kept, _note = _timeline([_huge_steps(200, 40)], "auto")
    held = _operators_per_step(kept, 40)
    assert min(held) == 2 and set(held.values()) == {40}  # whole steps, from the first past warm-up
    assert len(held) * 40 <= 300 + 40  # at most one step past the budget


def test_all_keeps_everything():
    kept, note = _timeline([_run(10)], "all")
    assert len(kept) == 30 and note is None


def test_each_process_counts_its_own_steps():
    kept, _ = _timeline([_run(10, pid=1), _run(10, pid=2)], "1")
    assert sorted({(pid, start // 100 + 1) for domain, _, pid, start in kept if domain == "PyTorch"}) == [(1, 1), (2, 1)]


@pytest.mark.parametrize("bad", ["x", "3-1", "0", "-0", "1-", ""])
def test_a_bad_window_is_refused(bad):
    with pytest.raises(ValueError):
        StepWindow.parse(bad)


@pytest.mark.slow
def test_report_can_rewrite_the_timeline_for_another_window(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 1)\nfor i in range(30):  # autoitt: step\n"
        "    model(torch.ones(2))\n")
    # every step records its operators, so the window has some to leave out (sampled, only the window's would)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "--trace-steps", "2-3", "--torch-ops", "all",
                   "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "steps 2-3 of 30" in json.loads(done.stdout)["trace_window"]
    narrow = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert "steps 2-3 of 30" in narrow["otherData"]["window"]
    again = autoitt("report", "--json", "--trace-steps", "all", "out", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["trace_window"] is None
    wide = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert len(wide["traceEvents"]) > len(narrow["traceEvents"])


def test_the_window_is_the_same_however_the_file_is_cut_into_blocks(tmp_path):
    """The window is found as the steps end: steps and their operators split across blocks change nothing."""
    from instrumenter.builtin.trace.scan import scan_trace_file
    from tests.trace_writer import TraceWriter, steps_with_operators

    writer = TraceWriter(tmp_path / "itt-100.bin")
    steps_with_operators(writer, 500, 3, domain=DOMAIN)
    writer.close()
    context = read_context(["step"], [DOMAIN], trace_steps="2-4,250,-3")

    def window(block_bytes):
        scan = scan_trace_file(tmp_path / "itt-100.bin", block_bytes=block_bytes)
        found = aggregate([scan], [DOMAIN], keep_policy(context.trace_steps), start_paused=False, step_labels=["step"])
        kept, note = timeline(found, context)
        return sorted(zip(kept.start.tolist(), kept.group.tolist())), note

    whole, note = window(1 << 24)
    assert window(700) == (whole, note)
    operator_steps = sorted({start // 1000 + 1 for start, _ in whole if start % 1000})
    assert operator_steps == [2, 3, 4, 250, 498, 499, 500]
    assert "steps 2-4, 250, the last 3 of 500" in note
