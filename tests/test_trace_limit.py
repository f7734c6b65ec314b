"""The collector's trace limit (``AUTOITT_TRACE_LIMIT``): the file stops growing, the statistics stay exact.

Real collector, real ``ittapi`` static part; the statistics are the reader's
(:func:`~instrumenter.builtin.statistics.aggregate.aggregate`) over what the file holds
and what the collector counted past the limit.
"""

from __future__ import annotations

import signal

import pytest

from instrumenter.builtin.statistics.aggregate import aggregate
from instrumenter.builtin.statistics.intervals import Keep
from instrumenter.builtin.trace.scan import scan_trace_dir
from tests.test_collector import run_target

LIMIT = 300_000  # bytes: about 9000 records, a fifth of the run below

# one loop task around 20000 steps, each holding an op and an op nested in an op (recursion)
TRAINING = """
    import os, signal, sys, ittapi.compat as itt
    d = itt.domain_create("lim")
    itt.task_begin(d, "loop")
    for i in range(20000):
        itt.task_begin(d, "step")
        itt.task_begin(d, "op"); itt.task_end(d)
        itt.task_begin(d, "op"); itt.task_begin(d, "op"); itt.task_end(d); itt.task_end(d)
        itt.task_end(d)
    {after}
"""


def statistics(traces, limit=True):
    found = aggregate(scan_trace_dir(traces)[0], ["lim"], Keep(), start_paused=False)
    return found, {name: int(found.count[g]) for g, (_domain, name) in enumerate(found.groups)}


def test_past_the_limit_the_file_stops_growing_and_every_task_is_counted(tmp_path):
    _, traces = run_target(tmp_path, TRAINING.format(after="itt.task_end(d)"), AUTOITT_TRACE_LIMIT=str(LIMIT))
    (path,) = traces.glob("itt-*.bin")
    assert path.stat().st_size <= LIMIT + 64 * 1024  # the last few records past it: limit mark, ends, counts
    found, counts = statistics(traces)
    assert counts == {"loop": 1, "step": 20000, "op": 60000}
    assert found.limited and any("reached the trace limit" in w for w in found.warnings)
    assert len(found.kept) < 81001 // 4  # the timeline stops at the limit


def test_past_the_limit_each_instant_is_still_counted_once(tmp_path):
    """Self times are disjoint and cover the thread's task time: their sum is the thread time, exactly,
    across the limit (the loop began before it and ended after it)."""
    _, traces = run_target(tmp_path, TRAINING.format(after="itt.task_end(d)"), AUTOITT_TRACE_LIMIT=str(LIMIT))
    found, _ = statistics(traces)
    loop = found.groups.index(("lim", "loop"))
    assert int(found.self_ns.sum()) == found.thread_time_ns == int(found.sum_ns[loop])
    op = found.groups.index(("lim", "op"))
    assert 0 < found.inside_ns[op] < found.sum_ns[op]  # the nested op's time counted once in its time inside
    assert found.histogram.sum() == 80001


def test_the_same_run_without_a_limit_counts_the_same(tmp_path):
    _, traces = run_target(tmp_path, TRAINING.format(after="itt.task_end(d)"))
    found, counts = statistics(traces)
    assert counts == {"loop": 1, "step": 20000, "op": 60000}
    assert not found.limited and len(found.kept) == 80001


def test_tasks_open_at_exit_past_the_limit_end_there_unfinished(tmp_path):
    _, traces = run_target(tmp_path, TRAINING.format(after='itt.task_begin(d, "step"); sys.exit(0)'),
                           AUTOITT_TRACE_LIMIT=str(LIMIT))
    found, counts = statistics(traces)
    assert counts == {"loop": 1, "step": 20001, "op": 60000}
    assert found.unfinished == 2  # the loop (begun before the limit) and the last step
    assert int(found.self_ns.sum()) == found.thread_time_ns


def test_a_fatal_signal_past_the_limit_keeps_the_counts(tmp_path):
    _, traces = run_target(tmp_path, TRAINING.format(after="os.kill(os.getpid(), signal.SIGTERM)"),
                           expect_rc=-signal.SIGTERM, AUTOITT_TRACE_LIMIT=str(LIMIT))
    _, counts = statistics(traces)
    assert counts == {"loop": 1, "step": 20000, "op": 60000}


@pytest.mark.parametrize("value", ["", "none", "-1", "12x"])
def test_a_limit_that_is_not_a_number_of_bytes_is_no_limit(tmp_path, value):
    _, traces = run_target(tmp_path, TRAINING.format(after="itt.task_end(d)"), AUTOITT_TRACE_LIMIT=value)
    found, _ = statistics(traces)
    assert not found.limited and len(found.kept) == 80001


@pytest.mark.slow
def test_profile_past_its_trace_limit_counts_every_step_and_says_where_the_timeline_stops(tmp_path):
    from tests.test_profile import autoitt
    import json

    (tmp_path / "train.py").write_text("x = 0\nfor i in range(30000):  # autoitt: step\n    x += i\nprint(x)\n")
    done = autoitt("profile", "--json", "--trace-limit", "64K", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["steps"][0]["count"] == 30000
    assert any("reached the trace limit" in w for w in summary["warnings"])
    (trace,) = (tmp_path / "out" / "itt").glob("itt-*.bin")
    assert trace.stat().st_size < 200_000
