"""Training loops of JAX and DeepSpeed, profiled for real with the built-in collector: the steps recorded are the
steps the run itself counts.

- JAX: a ``jax.jit``-compiled step (Flax's TrainState, optax's optimizer) called from a Python loop. The step is
  compiled code, so its call site is marked, not its body (README, "autoitt loops").
- DeepSpeed on CPU (gloo): an engine's ``engine.backward(loss)`` and ``engine.step()`` in the script's loop, in one
  process and in two ranks started by the ``deepspeed`` launcher. DeepSpeed compiles a small op of its own on
  first use (it needs a C++ compiler, and takes about 30 s once: torch's extension cache keeps it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap

import pytest

from tests.conftest import free_port
from tests.test_processes import PATH_WITHOUT_BIN, _profile_ranks
from tests.test_profile import autoitt

JAX_TRAIN = textwrap.dedent(
    """\
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state


    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(nn.relu(nn.Dense(8)(x)))


    @jax.jit
    def train_step(state, xb, yb):
        def loss_fn(params):
            return jnp.mean((state.apply_fn(params, xb) - yb) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss


    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (48, 4))
    y = jnp.sum(x, axis=1, keepdims=True)
    model = Model()
    state = train_state.TrainState.create(apply_fn=model.apply, params=model.init(key, x[:1]), tx=optax.adam(1e-2))
    for epoch in range(3):
        for start in range(0, 48, 8):
            state, loss = train_step(state, x[start:start + 8], y[start:start + 8])
            print(f"step {int(state.step)} loss {float(loss):.4f}", flush=True)
    """)

DEEPSPEED_TRAIN = textwrap.dedent(
    """\
    import os

    import deepspeed
    import torch

    if "RANK" not in os.environ:
        # one process without the deepspeed launcher: the rendezvous the launcher would set for its ranks
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ["TEST_PORT"])
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "SGD", "params": {"lr": 0.01}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    data = torch.randn(24, 8)
    target = data.sum(dim=1, keepdim=True)
    for epoch in range(2):
        for start in range(0, 24, 4):
            loss = torch.nn.functional.mse_loss(engine(data[start:start + 4]), target[start:start + 4])
            engine.backward(loss)
            engine.step()
            print(f"rank {engine.global_rank} step {engine.global_steps} loss {loss.item():.4f}", flush=True)
    torch.distributed.destroy_process_group()
    """)


def _profile(tmp_path, script, env=None):
    (tmp_path / "train.py").write_text(script)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "train.py", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done


def _steps(summary):
    return [(s["label"], s["count"]) for s in summary["steps"]]


def _counted(pattern, output):
    """The step numbers the run printed, each once per process."""
    return re.findall(pattern, output, re.M)


@pytest.mark.slow
def test_a_jit_compiled_jax_step_called_from_a_python_loop_is_recorded_step_by_step(tmp_path):
    summary, done = _profile(tmp_path, JAX_TRAIN)
    printed = _counted(r"^step (\d+) loss", done.stderr)
    assert [int(n) for n in printed] == list(range(1, 19))  # TrainState.step: the run's own count
    assert _steps(summary) == [("step", len(printed))]
    tasks = {t["name"]: t["count"] for t in summary["tasks"] if t["domain"] == "autoitt.train"}
    assert tasks["epoch"] == 3


@pytest.mark.slow
def test_a_deepspeed_engines_steps_on_cpu_are_recorded(tmp_path):
    summary, done = _profile(tmp_path, DEEPSPEED_TRAIN, env={"TEST_PORT": str(free_port())})
    printed = _counted(r"^rank 0 step (\d+) loss", done.stderr)
    assert [int(n) for n in printed] == list(range(1, 13))  # engine.global_steps: the engine's own count
    assert _steps(summary) == [("step", len(printed))]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("deepspeed", path=os.path.dirname(sys.executable)) is None, reason="no deepspeed")
def test_a_deepspeed_engines_steps_in_two_ranks_are_recorded_per_rank(tmp_path):
    (tmp_path / "train.py").write_text(DEEPSPEED_TRAIN)
    summary, done = _profile_ranks(tmp_path, f"deepspeed --num_gpus 2 --master_port {free_port()}",
                                   env={"PATH": PATH_WITHOUT_BIN})
    for rank in (0, 1):
        assert [int(n) for n in _counted(rf"rank {rank} step (\d+) loss", done.stderr)] == list(range(1, 13))
    assert [(rank["rank"], _steps(rank)) for rank in summary["ranks"]] == [(0, [("step", 12)]), (1, [("step", 12)])]
