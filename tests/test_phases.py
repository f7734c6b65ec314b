"""Where a step's time goes: data, forward, backward, optimizer, communication, other operators, Python.

Real PyTorch loops under emit_itt and the real collector; the phases come
from the same pass as every other statistic (instrumenter/builtin/statistics/phases.py
has the rules). Where the split of operator time matters (an optimizer's
closure, DDP), it is checked against torch.profiler's on the same script
(tests/torch_reference.py), within 10 points: the two profilers' own costs
differ, and these machines are noisy. Where torch.profiler's cost moves its
own split that far (a Lightning fit), the reference is the clock's split of
the run with no profiler.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gloo_exit import past_gloos_exit_abort
from tests.test_profile import autoitt

REFERENCE = Path(__file__).with_name("torch_reference.py")

COMMON = """
import time, torch
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
torch.set_num_threads(1)
"""

DATA_BOUND = COMMON + """
class Slow(Dataset):
    def __len__(self):
        return 32
    def __getitem__(self, i):
        time.sleep(0.004)  # reading and decoding a sample
        return torch.randn(8), torch.randn(1)

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Slow(), batch_size=4):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""

SLOW_OPTIMIZER = COMMON + """
params = [torch.nn.Parameter(torch.randn(64)) for _ in range(1000)]  # many small tensors: a costly step
optimizer = torch.optim.Adam(params, foreach=False)
x = torch.randn(64)
for i in range(8):
    optimizer.zero_grad()
    sum((p * x).sum() for p in params[:4]).backward()
    optimizer.step()
"""


def phases_of(tmp_path, script):
    (tmp_path / "train.py").write_text(script)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (step,) = json.loads(done.stdout)["steps"]
    return step["phases"]


@pytest.mark.slow
def test_a_data_bound_loop_has_data_as_its_largest_phase(tmp_path):
    phases = phases_of(tmp_path, DATA_BOUND)
    assert max(phases, key=lambda name: phases[name]["share"]) == "data"
    assert phases["data"]["seconds_per_step"] >= 4 * 0.004 * 0.9  # four samples a batch


@pytest.mark.slow
def test_a_heavy_optimizer_is_its_loops_largest_operator_phase(tmp_path):
    phases = phases_of(tmp_path, SLOW_OPTIMIZER)
    # Among the operator phases: on a machine busy with other work, the wall time the loop waits for a core
    # lands in `data` or `python` (CI saw both outgrow the optimizer); telling contention apart is issue 23's.
    operators = ("forward", "backward", "optimizer", "other_ops")
    assert max(operators, key=lambda name: phases[name]["share"]) == "optimizer"


MANUAL_UPDATE = COMMON + """
import json, sys
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
x, y = torch.randn(8, 512), torch.randn(8, 512)
forward, update = [], []
for step in range(60):
    model.zero_grad()
    started = time.perf_counter()
    loss = torch.nn.functional.mse_loss(model(x), y)
    forward.append(time.perf_counter() - started)
    loss.backward()
    started = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with torch.no_grad():
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.01)
    update.append(time.perf_counter() - started)
print(json.dumps({"forward_s": sum(forward) / 60, "update_s": sum(update) / 60}), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.alone  # a phase against the program's clock: a second test on the two cores moves one, not the other
def test_a_manual_update_and_gradient_clipping_after_backward_are_optimizer(tmp_path):
    """No optimizer task holds them: their operators are the update because they run after the backward."""
    (tmp_path / "train.py").write_text(MANUAL_UPDATE)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    clock = json.loads(done.stderr.strip().splitlines()[-1])
    (step,) = json.loads(done.stdout)["steps"]
    optimizer, forward = (step["phases"][name]["seconds_per_step"] for name in ("optimizer", "forward"))
    # The update's operators, less the Python between them: most of the block the program timed. Both are
    # means (a median let one slow step on a busy machine put the phase above the clock); the program's mean
    # takes in the warm-up steps the phase leaves out, which can only raise it.
    assert 0.5 * clock["update_s"] <= optimizer <= 1.1 * clock["update_s"], (clock, step["phases"])
    # and the forward holds none of it (counted as forward, the update would double it)
    assert forward <= 1.1 * clock["forward_s"], (clock, step["phases"])


BATCH_IN_STEP = COMMON + """
import json, sys
data = torch.randn(200_000, 64)
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
made = []

def get_batch():
    started = time.perf_counter()
    rows = torch.randint(0, len(data) - 64, (256,))
    x = torch.stack([data[i:i + 8].flatten()[:64] for i in rows])
    made.append(time.perf_counter() - started)
    return x, x.clone()

for step in range(40):
    X, Y = get_batch()
    loss = torch.nn.functional.mse_loss(model(X), Y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(json.dumps({"batch_s": sum(made) / len(made)}), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.alone  # a phase against the program's clock: a second test on the two cores moves one, not the other
def test_the_operators_that_make_the_batch_inside_the_step_are_data_not_forward(tmp_path):
    (tmp_path / "train.py").write_text(BATCH_IN_STEP)
    # every step records its operators, so that the program's clock times get_batch with the same cost of
    # recording its 258 operators as the phases do (sampled, most steps the clock times record none)
    done = autoitt("profile", "--json", "--torch-ops", "all", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    clock = json.loads(done.stderr.strip().splitlines()[-1])["batch_s"]
    (step,) = json.loads(done.stdout)["steps"]
    data, forward = step["phases"]["data"]["seconds_per_step"], step["phases"]["forward"]["seconds_per_step"]
    # get_batch's 256 slices and its stack, timed by the program: data, within what the clock and a loaded
    # machine allow; the model's one Linear is far less. Both are means: against the clock's median, a few slow
    # steps on a loaded machine put the phase's mean at 1.7 times it (3.13's suite)
    assert 0.7 * clock <= data <= 1.3 * clock, (data, clock, step["phases"])
    assert forward < 0.5 * data


@pytest.mark.slow
def test_a_data_bound_loops_iteration_time_counts_its_wait_for_data_and_comes_first(tmp_path):
    (tmp_path / "train.py").write_text(DATA_BOUND)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (step,) = json.loads(done.stdout)["steps"]
    waiting = step["phases"]["data"]["seconds_per_step"]
    assert step["iteration_s"] == pytest.approx(sum(p["seconds_per_step"] for p in step["phases"].values()))
    assert step["iteration_s"] >= waiting >= 4 * 0.004 * 0.9
    shown = autoitt("report", "out", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.index("Iteration time (step, over") < shown.stdout.index("Step time (step,")


@pytest.mark.slow
def test_phase_shares_sum_to_one_and_the_phases_are_named(tmp_path):
    phases = phases_of(tmp_path, DATA_BOUND)
    assert sum(phase["share"] for phase in phases.values()) == pytest.approx(1.0, abs=0.05)
    assert set(phases) == {"data", "forward", "backward", "optimizer", "other_ops", "python"}  # no collective: no
    # communication phase


@pytest.mark.slow
def test_without_operator_tasks_the_work_is_one_compute_phase(tmp_path):
    (tmp_path / "train.py").write_text(DATA_BOUND)
    done = autoitt("profile", "--json", "--no-torch-ops", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(json.loads(done.stdout)["steps"][0]["phases"]) == {"data", "compute", "python"}


THIN = "python and compute are told apart by the samples taken in these steps"


@pytest.mark.slow
def test_a_python_and_compute_split_that_stands_on_few_samples_says_so(tmp_path):
    # 8 steps of a few ms of CPU each: a handful of samples at 50 a second (timers, in a VM), a few dozen at perf's
    # 1000; either way the note is there exactly when the steps' samples are under the 50 the summary calls thin
    (tmp_path / "train.py").write_text(DATA_BOUND)
    done = autoitt("profile", "--no-torch-ops", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    sampling = json.loads((tmp_path / "out" / "summary.json").read_text())["sampling"]
    worth = round(sampling["phase_split_cpu_s"]["step"] / sampling["period_s"])
    # none at all is said otherwise (tests/test_notes.py)
    note = (THIN + ": about") if worth else "no sample was taken in these steps"
    shown = " ".join(done.stdout.split())
    assert (note in shown) == (worth < 50), (worth, shown)
    assert (note in (tmp_path / "out" / "report.html").read_text()) == (worth < 50)  # the report's phases too


@pytest.mark.slow
def test_phases_from_operator_tasks_do_not_stand_on_samples(tmp_path):
    (tmp_path / "train.py").write_text(DATA_BOUND)
    done = autoitt("profile", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["sampling"]["phase_split_cpu_s"] == {}
    assert THIN not in " ".join(done.stdout.split())


LBFGS = COMMON + """
x = torch.randn(2048, 64)
y = torch.sin(x[:, :1] * 3) + x[:, 1:2] ** 2
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256), torch.nn.Tanh(),
                            torch.nn.Linear(256, 1))
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=20, tolerance_grad=0, tolerance_change=0)

def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss

for step in range(6):
    optimizer.step(closure)
"""

LIGHTNING = COMMON + """
import pytorch_lightning as pl
from torch.utils.data import TensorDataset

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(128, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                       torch.nn.ReLU(), torch.nn.Linear(1024, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

data = TensorDataset(torch.randn(24 * 256, 128), torch.randint(0, 10, (24 * 256,)))
trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(Model(), DataLoader(data, batch_size=256))
"""

DDP = """
import contextlib, os, socket, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

def reference():
    if "TORCH_REFERENCE" not in os.environ:
        return contextlib.nullcontext()
    sys.path.insert(0, os.environ["TORCH_REFERENCE"])
    from torch_reference import profiled
    # uncapped: a rank's backward that waits long for the other rank's gradients (the other lost its core)
    # is time of this rank's step, which autoitt counts too; the cap would take it out of the reference
    return profiled(cap=None)

def train(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                                        torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                                        torch.nn.Linear(512, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    with reference():
        for step in range(60):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    # the process group torn down while the interpreter is whole: it narrows gloo's abort at exit
    # (pytorch#179291), which tests/gloo_exit.py describes and the test runs past
    del optimizer, model
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(port,), nprocs=2)
"""


def operator_split(phases):
    """Forward, backward and optimizer as shares of their sum (the part of a step both profilers see as operators)."""
    seconds = {name: phases[name]["seconds_per_step"] for name in ("forward", "backward", "optimizer")}
    whole = sum(seconds.values())
    return {name: value / whole for name, value in seconds.items()}


def reference_split(tmp_path, script, env=None, timed=False):
    """torch.profiler's split of the script's run (tests/torch_reference.py), averaged over its processes; with
    ``timed``, the split the clock gives the same run with no profiler (torch_reference.timed)."""
    command = [sys.executable, str(REFERENCE)] + (["--timed"] if timed else []) + ["train.py"]
    done = past_gloos_exit_abort(lambda: subprocess.run(command if env is None else [sys.executable, "train.py"],
                                                        cwd=tmp_path, capture_output=True, text=True, timeout=600,
                                                        env=env))
    assert done.returncode == 0, done.stderr[-3000:]
    found = [json.loads(line) for line in done.stderr.splitlines() if line.startswith('{"forward"')]
    assert found, done.stderr[-3000:]
    return {name: sum(split[name] for split in found) / len(found) for name in found[0]}


def _within_ten_points(ours, reference):
    return all(abs(ours[name] - reference[name]) <= 0.10 for name in ours)


def assert_splits_agree(tmp_path, script, phases=None, timed=False):
    """Our split of ``script``'s steps (``phases``, else a profile run now) within ten points of torch.profiler's
    (``timed``: of the clock's, see reference_split), each timed in its own run. On two busy cores the two runs can see different loads (LBFGS's optimizer update,
    small operators in Python, slows more than its backward when the other core's tests compete), so both
    are measured again once before the split is called wrong: a real disagreement is off both times."""
    for attempt in range(2):
        if phases is None or attempt:
            shutil.rmtree(tmp_path / "out", ignore_errors=True)
            phases = phases_of(tmp_path, script)
        ours, reference = operator_split(phases), reference_split(tmp_path, script, timed=timed)
        if _within_ten_points(ours, reference):
            return
    pytest.fail(f"ours {ours} against torch.profiler's {reference}, twice")


@pytest.mark.slow
@pytest.mark.alone
def test_an_optimizer_closures_forward_and_backward_are_not_optimizer_time(tmp_path):
    # LBFGS runs the closure (forward and backward) 20 times inside one Optimizer.step: counted as the
    # optimizer's, they would leave forward and backward nothing. Its own update grows with its history and
    # takes about half of the step here (torch.profiler: 0.48-0.49 of the operators' time, ours 0.49-0.50).
    phases = phases_of(tmp_path, LBFGS)
    assert phases["forward"]["share"] + phases["backward"]["share"] >= 0.3
    assert phases["optimizer"]["share"] < 0.7
    assert_splits_agree(tmp_path, LBFGS, phases)


@pytest.mark.slow
@pytest.mark.alone
def test_lightnings_automatic_optimization_splits_as_the_clock_does_without_a_profiler(tmp_path):
    """Lightning runs forward and backward in a closure inside Optimizer.step: they must not be the optimizer's.
    The reference is the clock's split of the same fit with no profiler (torch_reference.timed), not
    torch.profiler's: its own cost per operator weighs on Adam's ~90 small operators a step more than on the
    backward's few large ones, and moved its split ten points from the program's (its backward 0.36-0.38 of the
    three in 7 runs; the clock's 0.46-0.49 in 3, ours 0.45-0.48 in 7). On this model's large operators the Python inside
    a phase is a small part of it, so the clock's spans and the operators' times agree."""
    pytest.importorskip("pytorch_lightning")
    assert_splits_agree(tmp_path, LIGHTNING, timed=True)


@pytest.mark.slow
@pytest.mark.alone
def test_ddps_allreduce_wait_is_communication_and_its_collectives_are_operators(tmp_path):
    """The split is compared with a separately timed torch.profiler run. Here two ranks share the machine's
    two cores with whatever else runs, so the two runs can see different loads (once in a full suite on
    both cores: backward 63% against 75%; once in CI, with the 3.14 suite on both cores, the reference's ranks
    waited on each other twice running, backward 79% against our 68%, where quiet runs agree within 7 points).
    Both are measured again up to twice before the split is called wrong: a real disagreement is off all three
    times. A run ended by gloo's abort at exit, torch's (tests/gloo_exit.py), is
    run again."""
    (tmp_path / "train.py").write_text(DDP)
    env = dict(os.environ, TORCH_REFERENCE=str(REFERENCE.parent))

    def profile():
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        return autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)

    for _attempt in range(3):
        done = past_gloos_exit_abort(profile)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        (step,) = summary["steps"]
        phases = step["phases"]
        assert phases["communication"]["share"] > 0.05, phases
        assert {"gloo:all_reduce", "c10d::allreduce_"} <= {op["name"] for op in summary["operators"]}
        ours, reference = operator_split(phases), reference_split(tmp_path, DDP, env)
        if _within_ten_points(ours, reference):
            break
    else:
        pytest.fail(f"ours {ours} against torch.profiler's {reference}, three times")


KERAS_XLA = """
import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).standard_normal((40 * 256, 256)).astype(np.float32)
y = x[:, :10].argmax(axis=1)
model = tf.keras.Sequential([tf.keras.Input(shape=(256,)), tf.keras.layers.Dense(512, activation="relu"),
                             tf.keras.layers.Dense(512, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
model.fit(x, y, epochs=1, batch_size=256, verbose=0)
"""


@pytest.mark.slow
def test_tensorflow_running_xla_code_is_compute_not_python_and_the_note_says_xla(tmp_path):
    pytest.importorskip("tensorflow")
    phases = phases_of(tmp_path, KERAS_XLA)
    # XLA's kernels record no task: the samples tell the framework's time from the step's Python
    assert phases["compute"]["seconds_per_step"] > 2 * phases["python"]["seconds_per_step"], phases
    shown = autoitt("report", "out", cwd=tmp_path)
    assert "TensorFlow ran XLA-compiled code" in " ".join(shown.stdout.split())
    assert "oneDNN optimizations are off" not in shown.stdout
