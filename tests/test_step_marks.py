"""Where epochs start and evaluations ran, as indices of a step loop's durations, from hand-made kept instances."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

from instrumenter.builtin.statistics.intervals import Intervals
from instrumenter.builtin.statistics.step_marks import mark_labels, step_marks
from instrumenter.builtin.statistics.taskstats import step_stats
from tests.contexts import read_context
from transforms import RegionTasks

DOMAIN = "autoitt.train"
GROUPS = [(DOMAIN, "epoch_loop"), (DOMAIN, "epoch"), (DOMAIN, "step_loop"), (DOMAIN, "step"), (DOMAIN, "eval_loop"),
          (DOMAIN, "eval"), ("PyTorch", "eval_loop"), (DOMAIN, "other.step")]
TASKS = [RegionTasks.named(role, role, "for") for role in ("epoch", "step", "eval")]


def kept(*rows: Tuple[int, int, str, int, int]) -> Intervals:
    """(pid, tid, name, start, end) rows, as the pass keeps them: by process (in the order they first appear
    here, as the trace files are read), thread, then start; an end of -1 is an unfinished instance (ending at
    10**6)."""
    names = [name for _, name in GROUPS]
    processes = list(dict.fromkeys(r[0] for r in rows))
    ordered = sorted(rows, key=lambda r: (processes.index(r[0]), r[1], r[3]))
    return Intervals.of([r[0] for r in ordered], [r[1] for r in ordered],
                        [names.index(r[2]) if not r[2].startswith("PyTorch:") else 6 for r in ordered],
                        [r[3] for r in ordered], [r[4] if r[4] >= 0 else 10 ** 6 for r in ordered],
                        [r[4] >= 0 for r in ordered])


def epochs_of(steps_per_epoch: List[int], pid: int = 1, start: int = 0, step_ns: int = 10, gap: int = 5,
              evals: bool = True) -> List[tuple]:
    """Epochs of consecutive steps (each ``step_ns`` long), an eval loop after each epoch's steps."""
    rows, t = [], start
    for count in steps_per_epoch:
        begin = t
        t += gap
        for _ in range(count):
            rows.append((pid, pid, "step", t, t + step_ns))
            t += step_ns + 1
        if evals:
            rows.append((pid, pid, "eval_loop", t, t + 3))
            rows += [(pid, pid, "eval", t + 1, t + 2)]
            t += 4
        rows.append((pid, pid, "epoch", begin, t))
        t += gap
    return rows


def marks_of(intervals: Intervals, tasks=TASKS, label: str = "step"):
    return step_marks(intervals, GROUPS, read_context([label], [DOMAIN], tasks=tasks))[label]


def test_an_epoch_starts_at_its_first_step():
    marks = marks_of(kept(*epochs_of([4, 3, 5])))
    assert marks.epochs.tolist() == [0, 4, 7]


def test_an_evaluation_after_a_step_is_marked_at_that_step_once_not_per_batch():
    marks = marks_of(kept(*epochs_of([4, 3, 5])))
    assert marks.evals.tolist() == [3, 6, 11]
    assert not marks.evals_during.any()


def test_an_evaluation_inside_a_step_is_marked_during_it():
    rows = [(1, 1, "step", 0, 10), (1, 1, "step", 11, 40), (1, 1, "eval_loop", 20, 30), (1, 1, "step", 41, 50)]
    marks = marks_of(kept(*rows))
    assert marks.evals.tolist() == [1] and marks.evals_during.tolist() == [True]


def test_an_evaluation_before_the_first_step_is_not_marked():
    rows = [(1, 1, "eval_loop", 0, 5), (1, 1, "step", 10, 20), (1, 1, "step", 21, 30)]
    assert marks_of(kept(*rows)).evals.tolist() == []


def test_an_epoch_without_steps_of_the_loop_is_not_marked():
    rows = [(1, 1, "epoch", 0, 5), (1, 1, "epoch", 6, 30), (1, 1, "step", 10, 20), (1, 1, "step", 21, 29)]
    assert marks_of(kept(*rows)).epochs.tolist() == [0]


def test_an_unfinished_epoch_marks_the_steps_it_started():
    rows = epochs_of([3]) + [(1, 1, "epoch", 100, -1), (1, 1, "step", 105, 110), (1, 1, "step", 111, 120)]
    assert marks_of(kept(*rows)).epochs.tolist() == [0, 3]


def test_indices_follow_the_order_step_stats_gives_the_durations():
    # two processes, the one read first (7) running later, and an unfinished step (no duration)
    rows = epochs_of([2, 2], pid=7, start=1000) + epochs_of([3], pid=3, start=0) + [(3, 3, "step", 500, -1)]
    order = [7, 3]
    finished = sorted((r for r in rows if r[2] == "step" and r[4] >= 0), key=lambda r: (order.index(r[0]), r[3]))
    for number, row in enumerate(finished, 1):  # each finished step number ns long, in the order of the durations
        rows[rows.index(row)] = (row[0], row[1], "step", row[3], row[3] + number)
    intervals = kept(*rows)
    durations = step_stats(intervals, GROUPS, read_context(["step"], [DOMAIN]))[0].durations_s
    assert np.round(np.asarray(durations) * 1e9).astype(int).tolist() == [1, 2, 3, 4, 5, 6, 7]
    marks = marks_of(intervals)
    # process 7 first (epochs of 2 and 2 steps), then process 3 (3 steps)
    assert marks.epochs.tolist() == [0, 2, 4]
    assert marks.evals.tolist() == [1, 3, 6]


def test_an_evaluation_in_another_process_marks_none_of_this_ones_steps():
    rows = [(1, 1, "step", 0, 10), (1, 1, "step", 20, 30), (2, 2, "eval_loop", 12, 15), (2, 2, "step", 20, 25)]
    assert marks_of(kept(*rows)).evals.tolist() == []


def test_tasks_of_other_domains_are_not_marks():
    rows = [(1, 1, "step", 0, 10), (1, 1, "PyTorch:eval_loop", 12, 15), (1, 1, "step", 20, 30)]
    assert marks_of(kept(*rows)).evals.tolist() == []


def test_each_step_loop_gets_its_own_indices():
    rows = epochs_of([2, 2]) + [(1, 1, "other.step", 6, 7), (1, 1, "other.step", 40, 41)]
    found = step_marks(kept(*rows), GROUPS, read_context(["step", "other.step"], [DOMAIN], tasks=TASKS))
    assert found["step"].epochs.tolist() == [0, 2]
    assert found["other.step"].epochs.tolist() == [0, 1] and found["other.step"].evals.tolist() == [0, 1]


def test_a_run_past_its_trace_limit_has_partial_marks():
    intervals = kept(*epochs_of([2]))
    assert step_marks(intervals, GROUPS, read_context(["step"], [DOMAIN], tasks=TASKS), partial=True)["step"].partial


def test_roles_come_from_the_regions_task_names_and_the_library_callbacks():
    names = {"epoch", "epoch_loop", "step", "step_loop", "val", "val_loop", "evaluate", "eval_loop", "eval", "pass"}
    tasks = [RegionTasks.named("epoch", "pass", "for"), RegionTasks.named("eval", "val", "for"),
             RegionTasks.named("eval", "evaluate", "call"), RegionTasks.named("step", "step", "for")]
    epochs, evals = mark_labels(tasks, names, ["step"])
    assert epochs == {"pass", "epoch"}  # the region's, and a library's epochs
    assert evals == {"val_loop", "evaluate", "eval_loop"}  # a loop's whole run, a call, a library's eval run
