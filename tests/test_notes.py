"""The summary's notes (instrumenter/builtin/output/notes.py): each finding worth a look gets one sentence.

Summaries built by hand, as the read stage gives them; one real run checks
the primitive-cache note end to end.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from instrumenter.builtin.output.notes import FEW_SAMPLES, notes, thin_hotspots, thin_phase_split
from instrumenter.profile.instrumentation import FileRecord, Instrumentation
from instrumenter.builtin.statistics.summary import BuiltinSummary, StepStats, TaskStats
from tests.test_profile import autoitt
from transforms import LineMap

DOMAIN = "autoitt.train"


def summary(tasks=(), steps=(), split=None, elapsed=10.0):
    return BuiltinSummary(elapsed_s=elapsed, collected_s=1.0, processes=1, threads=1, events=10, tasks=list(tasks),
                   steps=list(steps), operators=[], unfinished=0, warnings=[], run_split=split)


def task(name, domain=DOMAIN, count=3):
    return TaskStats(domain, name, count, 0.1, 0.1, 0.01, 0.01, 0.01, 0.1)


def step(**fields):
    values = dict(label="step", count=10, mean_s=0.01, median_s=0.01, p95_s=0.01, first_s=0.01,
                  steady_mean_s=0.01, steady_median_s=0.01, phase_steps=8)
    values.update(fields)
    return StepStats(**values)


def instrumentation(regions=(), frameworks=("torch",)):
    record = FileRecord(path="/w/train.py", relative="train.py", module=None, runs="/r/train_itt.py",
                        outcome="instrumented", domain=DOMAIN, own_domains=(), step_labels=("step",),
                        runtime=(), sha256="", regions=tuple(regions), line_map=LineMap.identity(10),
                        frameworks=tuple(frameworks))
    return Instrumentation(script="train.py", start_paused=True, files=(record,))


def test_a_run_mostly_before_training_is_noted():
    found = notes(summary(split={"before_s": 7.5, "collected_s": 2.0, "between_s": 0.0, "after_s": 0.5}), None)
    assert found == ["75% of the run is before training starts (start-up, imports, data preparation: not collected)"]


def test_costly_primitive_creation_in_steady_steps_is_noted():
    found = notes(summary(steps=[step(steady_creations=16, steady_creation_s=0.002)]), None)
    assert len(found) == 1 and "20% of its median" in found[0] and "16 creations in 8 steps" in found[0]


def test_primitive_creations_that_hit_the_cache_are_not_noted():
    assert notes(summary(steps=[step(steady_creations=70, steady_creation_s=0.00001)]), None) == []


def test_an_evaluation_that_recorded_nothing_is_said_to_be_uncollected():
    regions = [{"line": 40, "role": "eval", "label": "eval"}, {"line": 30, "role": "step", "label": "step"}]
    found = notes(summary(tasks=[task("step")], steps=[step()]), instrumentation(regions))
    assert found == ["the evaluation at train.py:40 was not collected: it ran after the last pause (or not at all)"]


def test_iterations_begun_while_collection_was_paused_are_noted_with_their_count():
    regions = [{"line": 40, "role": "eval", "label": "eval"}, {"line": 30, "role": "step", "label": "step"}]
    paused = replace(summary(tasks=[task("step"), task("eval")], steps=[step()]), uncollected={"eval": 3, "eval_loop": 1})
    assert notes(paused, instrumentation(regions)) == [
        "the evaluation loop at train.py:40 ran 3 `eval` iteration(s) while collection was paused (outside every "
        "training region, as after the last one ended): they are in none of these figures"]


def test_an_evaluation_that_was_recorded_is_not_noted():
    regions = [{"line": 40, "role": "eval", "label": "eval"}]
    assert notes(summary(tasks=[task("step"), task("eval")], steps=[step()]), instrumentation(regions)) == []


def test_tensorflow_without_onednn_tasks_says_how_to_turn_them_on():
    (found,) = notes(summary(tasks=[task("step")]), instrumentation(frameworks=("tensorflow",)))
    assert "TF_ENABLE_ONEDNN_OPTS=1" in found


def test_tensorflow_running_xla_is_said_to_and_onednn_is_not_blamed():
    found = summary(tasks=[task("step")])
    found.sampling = {"xla": True}
    said = notes(found, instrumentation(frameworks=("tensorflow",)))
    assert any("XLA-compiled code" in note for note in said) and not any("oneDNN" in note for note in said)


def machine(other_cpu_s, cpus=2.0, elapsed_s=10.0):
    return {"cpus": cpus, "run_cpu_s": 5.0, "other_cpu_s": other_cpu_s, "elapsed_s": elapsed_s}


def test_other_work_taking_the_machines_cores_is_noted_with_the_warm_up_it_may_explain():
    found = summary(steps=[step(warmup_steps=22)])
    found.machine = machine(other_cpu_s=14.0)
    (note,) = [n for n in notes(found, None) if "other work" in n]
    assert "kept 1.4 of its 2 cores busy" in note and "the warm-up (22 `step` steps)" in note


def test_a_little_other_work_is_not_noted():
    for other, cpus in ((4.0, 2.0), (8.0, 32.0)):  # 0.4 cores; 0.8 cores of 32
        found = summary()
        found.machine = machine(other_cpu_s=other, cpus=cpus)
        assert not any("other work" in n for n in notes(found, None))


def test_the_machines_other_work_is_its_busy_time_less_the_runs_and_autoitts():
    from instrumenter.profile.machine import Usage, during

    found = during(Usage(machine_s=100.0, children_s=10.0, own_s=1.0), Usage(130.0, 25.0, 1.5), elapsed_s=20.0)
    assert found["run_cpu_s"] == 15.0 and found["other_cpu_s"] == 30.0 - 15.0 - 0.5 and found["elapsed_s"] == 20.0
    assert during(None, Usage(1.0, 1.0, 1.0), 1.0) is None


def test_tensorflow_with_onednn_tasks_needs_no_hint():
    tasks = [task("step"), task("inner_product", domain="dnnl::primitive::execute")]
    assert notes(summary(tasks=tasks), instrumentation(frameworks=("tensorflow",))) == []


def split_sampling(samples_in_steps, period_s=0.02):
    return {"period_s": period_s, "phase_split_cpu_s": {"step": samples_in_steps * period_s}}


def test_a_python_and_compute_split_on_few_samples_says_how_many():
    said = thin_phase_split(split_sampling(3), "step")
    assert "about 3 samples (20.00 ms of CPU each), too few to split them closely" in said


def test_a_python_and_compute_split_on_enough_samples_needs_no_note():
    assert thin_phase_split(split_sampling(FEW_SAMPLES), "step") is None
    assert thin_phase_split(split_sampling(3), "other loop") is None  # a loop the samples did not split


def test_hotspots_on_few_samples_say_how_many_and_never_fewer_than_one():
    assert "stand on about 3 samples (20.00 ms of CPU each): too few" in thin_hotspots(
        {"period_s": 0.02, "collected_cpu_s": 0.06})
    assert "about 1 sample (20.00 ms" in thin_hotspots({"period_s": 0.02, "collected_cpu_s": 0.004})
    assert thin_hotspots({"period_s": 0.02, "collected_cpu_s": FEW_SAMPLES * 0.02}) is None


def test_a_split_with_no_sample_in_its_steps_says_nothing_told_them_apart():
    # a short fit of millisecond steps at 50 samples a second: python's sampled time is 0 of 0
    said = thin_phase_split(split_sampling(0), "step")
    assert said.startswith("no sample was taken in these steps") and "about 0" not in said


SHAPES_CHANGE = """
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(24):
    x = torch.randn(2, 3, 16 + 2 * i, 16 + 2 * i)  # a new image size every step: a new primitive
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
"""


@pytest.mark.slow
def test_a_loop_whose_shapes_change_every_step_gets_the_primitive_cache_note(tmp_path):
    (tmp_path / "train.py").write_text(SHAPES_CHANGE)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (steps,) = json.loads(done.stdout)["steps"]
    assert steps["steady_creations"] >= steps["phase_steps"]
    shown = autoitt("report", "out", cwd=tmp_path)
    assert "creating primitives" in shown.stdout


@pytest.mark.slow
def test_a_run_beside_other_busy_processes_is_told_the_cores_were_taken(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "train.py").write_text("import time\nfor step in range(40):  # autoitt: step\n    time.sleep(0.05)\n")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]
    try:
        done = autoitt("profile", "-r", "out", "train.py", cwd=tmp_path)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "note: other work on this machine kept" in " ".join(done.stdout.split())


EVALUATED_AFTER_TRAINING = """
import torch
model = torch.nn.Linear(16, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train = [(torch.randn(32, 16), torch.randint(0, 2, (32,))) for _ in range(10)]
val = [torch.randn(64, 16) for _ in range(3)]

def evaluate():
    with torch.no_grad():
        for x in val:
            model(x)

for epoch in range(2):
    for x, y in train:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    evaluate()
evaluate()  # after the last training region: collection is paused
"""


@pytest.mark.slow
def test_an_evaluation_run_after_training_is_counted_by_the_collector_and_noted(tmp_path):
    (tmp_path / "train.py").write_text(EVALUATED_AFTER_TRAINING)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["uncollected"] == {"eval": 3, "eval_loop": 1}
    assert sum(t["count"] for t in result["tasks"] if t["name"] == "eval") == 6  # the two inside the epochs
    shown = " ".join(autoitt("report", "out", cwd=tmp_path).stdout.split())
    assert "the evaluation loop at train.py:10 ran 3 `eval` iteration(s) while collection was paused" in shown
