"""The built-in backend's task statistics, from small hand-made traces (no process runs).

A trace here is the reader's :class:`ProcessTrace` with events written out as
(kind, name, ts) on one thread; times are nanoseconds. The aggregates are
checked against a plain stack-based pairing (:func:`reference`) on random
traces cut into random blocks, as the streaming reader sees them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple

from instrumenter.builtin.statistics.aggregate import aggregate
from instrumenter.builtin.statistics.intervals import Keep
from instrumenter.builtin.statistics.taskstats import summarize
from instrumenter.builtin.trace.events import Event
from instrumenter.builtin.trace.tracefile import ProcessTrace
from tests.trace_writer import event_scans
from tests.contexts import read_context

DOMAIN = "autoitt.train"


def trace(steps: Sequence[Tuple[str, Optional[str], int]], pid: int = 10, tid: int = 10) -> ProcessTrace:
    """One process, one thread: ``("begin", name, ts)`` and ``("end", None, ts)`` in order."""
    events = [Event(kind, pid, tid, ts, DOMAIN, name) for kind, name, ts in steps]
    return ProcessTrace(path=Path(f"itt-{pid}.bin"), pid=pid, ppid=1, start_ns=0, wall_start_ns=0, events=events)


def task(summary, name: str):
    return next(t for t in summary.tasks if t.name == name)


def summary_of(*traces: ProcessTrace):
    found = aggregate(event_scans(traces), [DOMAIN], Keep(), start_paused=False)
    return summarize(found, read_context(["step"], [DOMAIN]))


# train(depth=2) calls itself inside its loop: step_loop 0..100 holds step_loop 10..60 holds step_loop 20..40.
RECURSION = [
    ("begin", "step_loop", 0), ("begin", "step", 5),
    ("begin", "step_loop", 10), ("begin", "step", 15),
    ("begin", "step_loop", 20), ("begin", "step", 25), ("end", None, 35), ("end", None, 40),
    ("end", None, 50), ("end", None, 60),
    ("end", None, 70), ("end", None, 100),
]


def test_a_recursive_task_counts_its_time_once():
    loop = task(summary_of(trace(RECURSION)), "step_loop")
    assert round(loop.total_s * 1e9) == 100  # the outer instance: the nested ones lie inside it
    assert loop.share <= 1.0


def test_a_recursive_task_counts_every_instance_in_count_mean_min_and_max():
    loop = task(summary_of(trace(RECURSION)), "step_loop")
    assert loop.count == 3
    assert (loop.min_s * 1e9, loop.max_s * 1e9) == (20, 100)
    assert round(loop.mean_s * 1e9, 6) == round((100 + 50 + 20) / 3, 6)


def test_a_recursive_tasks_self_time_is_each_instances_own_and_within_its_total():
    summary = summary_of(trace(RECURSION))
    loop, step = task(summary, "step_loop"), task(summary, "step")
    # step_loop's own time: 0..5 and 70..100 (outer), 10..15 and 50..60 (middle), 20..25 and 35..40 (inner)
    assert round(loop.self_s * 1e9) == 35 + 15 + 10
    # step's: 5..10 and 60..70, 15..20 and 40..50, 25..35
    assert round(step.self_s * 1e9) == 15 + 15 + 10
    assert round(step.total_s * 1e9) == 65  # the outer step, 5..70
    assert round((loop.self_s + step.self_s) * 1e9) == round(summary.thread_time_s * 1e9)  # each instant once


def test_a_task_run_again_after_it_ended_counts_both_times():
    summary = summary_of(trace([("begin", "step", 0), ("end", None, 10), ("begin", "step", 10), ("end", None, 30)]))
    assert round(task(summary, "step").total_s * 1e9) == 30
    assert task(summary, "step").share == 1.0


def test_a_recursive_task_on_two_threads_counts_each_threads_time():
    one, other = trace(RECURSION, tid=10), trace(RECURSION, tid=11)
    both = ProcessTrace(path=one.path, pid=one.pid, ppid=1, start_ns=0, wall_start_ns=0,
                        events=sorted(one.events + other.events, key=lambda e: e.ts))
    loop = task(summary_of(both), "step_loop")
    assert round(loop.total_s * 1e9) == 200 and loop.count == 6
    assert loop.share == 1.0


def steps_of(durations):
    """One thread running steps of these durations, back to back."""
    events, ts = [], 0
    for duration in durations:
        events += [("begin", "step", ts), ("end", None, ts + duration)]
        ts += duration
    return trace(events)


def test_warm_up_lasts_until_step_time_settles():
    # dcgan's step times (ms): the summary used to call the mean of steps 2..8 the steady state
    step = summary_of(steps_of([2849, 2681, 2644, 553, 118, 70, 67, 71])).steps[0]
    assert (step.warmup_steps, round(step.warmup_s * 1e9)) == (5, 2849 + 2681 + 2644 + 553 + 118)
    assert round(step.steady_median_s * 1e9) == 70 and round(step.steady_mean_s * 1e9, 3) == round(208 / 3, 3)


def test_a_single_slow_step_later_is_not_warm_up():
    step = summary_of(steps_of([10, 10, 10, 10, 100, 10, 10, 10])).steps[0]
    assert step.warmup_steps == 0 and round(step.steady_p95_s * 1e9) == 100


def test_two_slow_steps_in_a_row_are_still_warm_up():
    step = summary_of(steps_of([50, 9, 60, 55] + [10] * 8)).steps[0]
    assert step.warmup_steps == 4 and round(step.steady_mean_s * 1e9) == 10


def test_a_run_that_never_settles_has_no_warm_up():
    assert summary_of(steps_of([10, 30, 10, 30, 10, 30])).steps[0].warmup_steps == 0


def test_a_steady_iteration_is_the_step_and_the_wait_before_it():
    # steps of 10 ns, each after a wait of 40 ns for its batch: iterations of 50 ns, steps of 10
    events, ts = [], 0
    for _ in range(12):
        events += [("begin", "step", ts + 40), ("end", None, ts + 50)]
        ts += 50
    step = summary_of(trace(events)).steps[0]
    assert round(step.steady_median_s * 1e9) == 10
    assert round(step.steady_iteration_median_s * 1e9) == 50 and round(step.steady_iteration_mean_s * 1e9) == 50


def test_the_steady_steps_are_kept_as_a_histogram_of_1_percent_buckets():
    step = summary_of(steps_of([10] * 6 + [20] * 4)).steps[0]
    assert sum(count for _, count in step.steady_histogram) == 10 - step.warmup_steps
    for lower, count in step.steady_histogram:
        assert any(lower * 1e9 <= d < lower * 1e9 * 1.01 for d in (10, 20))


def test_each_threads_first_step_has_no_iteration():
    first = trace([("begin", "step", 100), ("end", None, 110), ("begin", "step", 150), ("end", None, 160)], tid=1)
    second = trace([("begin", "step", 0), ("end", None, 10), ("begin", "step", 30), ("end", None, 40)], pid=11, tid=2)
    step = summary_of(first, second).steps[0]
    assert sum(count for _, count in step.steady_iteration_histogram) == 2  # 50 ns and 30 ns, not 110 - 40
