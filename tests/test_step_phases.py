"""How a step loop's phases are measured from task instances (instrumenter/builtin/statistics/phases.py:measure).

Synthetic instances, built as the pass keeps them: the rules for a step's
children, the time between steps, TensorFlow's work on its own threads, and
oneDNN primitives created in steady steps.
"""

from __future__ import annotations

import numpy as np
import pytest

from instrumenter.builtin.statistics import phases
from instrumenter.builtin.statistics.intervals import Intervals

OWN = ("autoitt.train",)
GROUPS = [("autoitt.train", "step_loop"), ("autoitt.train", "step"), ("PyTorch", "aten::conv2d"),
          ("PyTorch", "ConvolutionBackward0"), ("PyTorch", "Optimizer.step#Adam.step"),
          ("PyTorch", "aten::add_"), ("autoitt.train", "eval_loop"),
          ("dnnl::primitive::execute", "convolution"), ("dnnl::primitive::create", "convolution"),
          ("PyTorch", "Optimizer.closure"), ("PyTorch", "DistributedDataParallel.forward"),
          ("PyTorch", "c10d::allreduce_"), ("PyTorch", "gloo:all_reduce")]
(LOOP, STEP, FORWARD, BACKWARD, OPTIMIZER, ADD, EVAL, EXECUTE, CREATE, CLOSURE, DDP_FORWARD, ALLREDUCE,
 GLOO) = range(len(GROUPS))
CATEGORY = np.array([phases.category(d, n, OWN, {"step"}) for d, n in GROUPS])
CREATION = np.array([d == phases.CREATION_DOMAIN for d, _ in GROUPS])


def tasks(*rows):
    """Rows of (group, start, end[, tid]) in process 1."""
    rows = [row if len(row) == 4 else (*row, 10) for row in rows]
    group, start, end, tid = zip(*rows)
    return Intervals.of(1, tid, group, start, end, True)


def measure(t: Intervals, warm: int = 0):
    loop = np.flatnonzero(t.group == STEP)
    return phases.measure(t, loop[warm:], loop, CATEGORY, CREATION)


def test_a_steps_direct_children_give_forward_backward_and_optimizer_and_the_rest_is_python():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 10, 30), (ADD, 12, 20),
                          (BACKWARD, 30, 60), (OPTIMIZER, 60, 80)))
    assert found.steps == 1
    assert found.nanoseconds == {"data": 0, "forward": 20, "backward": 30, "optimizer": 20, "other_ops": 0,
                                 "python": 30}


def test_operators_the_step_runs_after_its_backward_are_the_update_so_optimizer():
    # a manual SGD update (p.data.add_ under no_grad) and clip_grad_norm_'s operators, after loss.backward()
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 10, 30), (BACKWARD, 30, 60), (FORWARD, 62, 70),
                          (ADD, 72, 90)))
    assert found.nanoseconds == {"data": 0, "forward": 20, "backward": 30, "optimizer": 8 + 18, "other_ops": 0,
                                 "python": 24}


def test_operators_between_two_backwards_stay_forward():
    # gradient accumulation in one step: the second micro-batch's forward runs after the first backward
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 0, 10), (BACKWARD, 10, 30), (FORWARD, 30, 40),
                          (BACKWARD, 40, 60), (ADD, 60, 70)))
    assert (found.nanoseconds["forward"], found.nanoseconds["optimizer"]) == (20, 10)


def test_a_step_without_a_backward_keeps_its_operators_forward():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 10, 30), (ADD, 40, 50)))
    assert (found.nanoseconds["forward"], found.nanoseconds["optimizer"]) == (30, 0)


def test_what_an_optimizers_closure_runs_is_forward_and_backward_and_only_the_rest_is_optimizer():
    # LBFGS: optimizer.step(closure) runs the forward and backward inside its own task, then its update (ADD)
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (OPTIMIZER, 10, 90), (CLOSURE, 15, 60),
                          (FORWARD, 20, 30), (BACKWARD, 30, 55), (ADD, 65, 85)))
    assert found.nanoseconds == {"data": 0, "forward": 10, "backward": 25, "optimizer": 80 - 45, "other_ops": 0,
                                 "python": 20 + 10}  # outside the optimizer, and the closure's own time


def test_a_closure_run_twice_gives_its_time_back_to_the_step_each_time():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (OPTIMIZER, 0, 100), (CLOSURE, 0, 30),
                          (FORWARD, 0, 30), (CLOSURE, 50, 90), (BACKWARD, 50, 90)))
    assert (found.nanoseconds["forward"], found.nanoseconds["backward"], found.nanoseconds["optimizer"]) == (30, 40, 30)


def test_a_pytorch_range_that_is_not_an_operator_is_looked_through():
    # DDP's forward is a record_function range around the model's operators
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (DDP_FORWARD, 10, 60), (FORWARD, 20, 40),
                          (BACKWARD, 60, 90)))
    assert found.nanoseconds == {"data": 0, "forward": 20, "backward": 30, "optimizer": 0, "other_ops": 0,
                                 "python": 50}


def test_a_collective_the_step_calls_is_communication():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 0, 40), (ALLREDUCE, 40, 60)))
    assert found.nanoseconds["communication"] == 20
    assert found.nanoseconds["python"] == 40


def test_waiting_outside_tasks_while_a_collective_runs_on_another_thread_is_communication():
    # DDP with gloo: the allreduce runs on gloo's thread; the step's thread waits at the end of backward()
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (BACKWARD, 10, 40), (GLOO, 20, 70, 11)))
    assert found.nanoseconds["communication"] == 30  # 40..70: the allreduce while no task ran on the step's thread
    assert found.nanoseconds["python"] == 100 - 30 - 30


def test_a_wait_inside_a_closure_is_communication_and_the_optimizers_own_time_stays_its_own():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (OPTIMIZER, 10, 90), (CLOSURE, 15, 60),
                          (BACKWARD, 20, 40), (GLOO, 30, 80, 11)))
    assert found.nanoseconds["communication"] == 20  # 40..60, in the closure; 60..80 is the optimizer's update
    assert found.nanoseconds["optimizer"] == 80 - 45
    assert found.nanoseconds["python"] == 100 - 20 - 20 - 35


def test_the_time_before_a_step_in_its_loop_is_data():
    found = measure(tasks((LOOP, 0, 100), (STEP, 10, 40), (STEP, 55, 90), (FORWARD, 12, 20), (FORWARD, 60, 70)))
    assert found.nanoseconds["data"] == 10 + 15  # loop start to the first step, then between the two


def test_an_own_region_between_steps_is_not_data():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 40), (EVAL, 45, 75), (STEP, 80, 95), (FORWARD, 1, 2)))
    assert found.nanoseconds["data"] == 5 + 5  # 40..45 and 75..80


def test_the_warm_up_steps_are_left_out():
    found = measure(tasks((LOOP, 0, 300), (STEP, 0, 200), (FORWARD, 0, 190), (STEP, 210, 250),
                          (FORWARD, 215, 225)), warm=1)
    assert found.steps == 1
    assert found.nanoseconds["forward"] == 10
    assert found.nanoseconds["data"] == 10  # after the warm-up step, not from the loop's start


def test_tasks_on_another_thread_are_not_the_steps_children():
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 10, 20), (FORWARD, 30, 90, 11)))
    assert found.nanoseconds["forward"] == 10


def test_without_operators_on_the_step_thread_work_on_the_frameworks_threads_is_compute():
    # TensorFlow: the step's thread waits while oneDNN runs on the thread pool (two overlapping primitives)
    found = measure(tasks((LOOP, 0, 100), (STEP, 0, 100), (EXECUTE, 20, 50, 11), (EXECUTE, 40, 70, 12),
                          (EXECUTE, 150, 190, 11)))
    assert found.nanoseconds == {"data": 0, "compute": 50, "python": 50}


def test_primitives_created_inside_steady_steps_are_counted_on_any_thread():
    found = measure(tasks((LOOP, 0, 300), (STEP, 0, 100), (CREATE, 10, 20), (STEP, 110, 200),
                          (CREATE, 120, 125, 11), (CREATE, 250, 260)), warm=1)
    assert (found.creations, found.creation_ns) == (1, 5)


def test_nothing_to_measure_without_steady_steps():
    t = tasks((LOOP, 0, 100), (STEP, 0, 100))
    assert phases.measure(t, np.zeros(0, np.int64), np.flatnonzero(t.group == STEP), CATEGORY, CREATION) is None


@pytest.mark.parametrize("seed", range(5))
def test_shares_cover_the_steps_and_the_time_between_them(seed):
    rng = np.random.default_rng(seed)
    rows, t = [], 0
    for _ in range(20):
        gap, length = int(rng.integers(0, 50)), int(rng.integers(20, 200))
        start = t + gap
        rows.append((STEP, start, start + length))
        inner = start + int(rng.integers(0, 5))
        for group in (FORWARD, BACKWARD, OPTIMIZER):
            width = int(rng.integers(0, (start + length - inner) // 3 + 1))
            rows.append((group, inner, inner + width))
            inner += width
        t = start + length
    rows.append((LOOP, 0, t))
    found = measure(tasks(*rows))
    steps = [r for r in rows if r[0] == STEP]
    assert sum(found.nanoseconds.values()) == sum(e - s for _, s, e in steps) + steps[0][1] + sum(
        b[1] - a[2] for a, b in zip(steps, steps[1:]))


def test_measuring_only_the_instances_near_the_chosen_steps_changes_nothing():
    from instrumenter.builtin.statistics.taskstats import _near

    rows, t = [], 0
    for i in range(100):
        rows += [(STEP, t + 5, t + 50), (FORWARD, t + 10, t + 20), (BACKWARD, t + 20, t + 40)]
        if i % 10 == 0:
            rows.append((EVAL, t + 50, t + 70))
        t += 80
    rows.append((LOOP, 0, t))
    everything = tasks(*rows)
    loop = np.flatnonzero(everything.group == STEP)
    chosen = loop[[1, 2, 3, 40, 41, 98, 99]]
    near, near_chosen, near_loop = _near(everything, chosen, loop)
    assert len(near) < len(everything) / 5
    whole = phases.measure(everything, chosen, loop, CATEGORY, CREATION)
    assert phases.measure(near, near_chosen, near_loop, CATEGORY, CREATION) == whole


def test_without_operator_tasks_the_samples_tell_the_steps_python_from_the_frameworks_compute():
    # TensorFlow with XLA: no task in the step; its thread ran Python for 2 of the 10 ms outside tasks
    found = {"data": {"seconds_per_step": 0.005, "share": 0.25}, "compute": {"seconds_per_step": 0.005, "share": 0.25},
             "python": {"seconds_per_step": 0.010, "share": 0.5}}
    refined = phases.with_samples(found, 0.002)
    assert {name: round(p["seconds_per_step"], 6) for name, p in refined.items()} == {
        "data": 0.005, "compute": 0.013, "python": 0.002}
    assert sum(p["share"] for p in refined.values()) == pytest.approx(1.0)
    assert phases.with_samples(found, 0.5)["python"]["seconds_per_step"] == 0.010  # never more than it was


def test_phases_with_operator_tasks_are_left_as_the_tasks_measured_them():
    found = {"forward": {"seconds_per_step": 0.004, "share": 0.4}, "python": {"seconds_per_step": 0.006, "share": 0.6}}
    assert phases.with_samples(found, 0.001) == found


def test_the_steps_measured_are_handed_on_per_thread():
    found = measure(tasks((LOOP, 0, 300), (STEP, 0, 100), (STEP, 110, 200), (STEP, 210, 290, 11)), warm=0)
    assert {key: (list(s), list(e)) for key, (s, e) in found.spans.items()} == {
        (1, 10): ([0, 110], [100, 200]), (1, 11): ([210], [290])}


def test_a_step_without_a_backward_keeps_its_operators_forward_beside_steps_with_one():
    found = measure(tasks((LOOP, 0, 200), (STEP, 0, 100), (FORWARD, 10, 30), (BACKWARD, 30, 50), (ADD, 50, 60),
                          (STEP, 100, 200), (FORWARD, 110, 130), (ADD, 140, 150)))
    assert (found.nanoseconds["forward"], found.nanoseconds["optimizer"]) == (20 + 30, 10)


def test_the_steps_own_statement_that_makes_its_batch_is_data_with_what_it_runs():
    # nanoGPT's get_batch inside the step: a `batch` task of autoitt's, its operators inside it
    groups = GROUPS + [("autoitt.train", "batch")]
    category = np.array([phases.category(d, n, OWN, {"step"}, {"batch"}) for d, n in groups])
    t = tasks((LOOP, 0, 100), (STEP, 0, 100), (FORWARD, 10, 30), (len(GROUPS), 30, 45), (ADD, 32, 40),
              (BACKWARD, 45, 80))
    loop = np.flatnonzero(t.group == STEP)
    found = phases.measure(t, loop, loop, category, np.append(CREATION, False))
    assert (found.nanoseconds["data"], found.nanoseconds["forward"]) == (15, 20)
