"""Operators with their library time: an operator's self time counts the oneDNN primitives it calls.

A real conv net under emit_itt and the real collector, its ranking checked
against torch.profiler's on the same model (torch.profiler sees no oneDNN
primitives: their time is its operators' own).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.test_profile import autoitt

MODEL = """
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
    torch.nn.Linear(32 * 16 * 16, 10))
optimizer = torch.optim.Adam(model.parameters())
data = [(torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))) for _ in range(12)]


def train():
    for x, y in data:  # autoitt: step
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
"""


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    work = tmp_path_factory.mktemp("conv")
    (work / "train.py").write_text(MODEL + "\ntrain()\n")
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    profiler = subprocess.run([sys.executable, "-c", MODEL + textwrap.dedent("""
        import json
        train()  # warm-up, as autoitt's run has its own
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            train()
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        print(json.dumps([e.key for e in rows if e.key.startswith("aten::")][:3]))
    """)], cwd=work, capture_output=True, text=True, timeout=300)
    assert profiler.returncode == 0, profiler.stderr[-3000:]
    return json.loads(done.stdout), json.loads(profiler.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_convolution_is_the_top_operator_as_torch_profiler_ranks_it(ranked):
    summary, by_profiler = ranked
    assert "convolution" in summary["operators"][0]["name"]
    assert any("convolution" in name for name in by_profiler[:2])


@pytest.mark.slow
def test_operators_are_sorted_by_self_time_with_their_onednn_primitives(ranked):
    summary, _ = ranked
    own = [op["self_with_library_s"] for op in summary["operators"]]
    assert own == sorted(own, reverse=True)
    assert all(op["self_with_library_s"] >= op["self_s"] for op in summary["operators"])
    backward = next(op for op in summary["operators"] if op["name"] == "aten::convolution_backward")
    assert backward["self_with_library_s"] > 2 * backward["self_s"]  # its oneDNN primitives did the work


@pytest.mark.slow
def test_no_operator_share_exceeds_the_thread_time(ranked):
    summary, _ = ranked
    assert all(op["self_with_library_s"] <= summary["thread_time_s"] for op in summary["operators"])
