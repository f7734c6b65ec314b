"""The sampling mechanism a run gets, chosen by what one perf interruption costs on the machine.

The measure is real (``_interrupt_cost``, perf_event_open on this VM); the
choice is checked against stand-in costs as well, since these machines are all
VMs and bare metal's 1-2 µs cannot be produced here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from instrumenter.collector import mechanism
from tests.test_profile import autoitt


def test_a_perf_interruption_is_measured_here():
    cost = mechanism.perf_interrupt_ns()
    assert cost is not None and cost > 0


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become uid 65534")
def test_an_unprivileged_user_measures_it_too():
    """perf_event_paranoid 2 lets a user's own threads be measured in user mode: what the collector needs."""
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                           "from instrumenter.collector import mechanism; print(mechanism.perf_interrupt_ns())"],
                          capture_output=True, text=True, timeout=60, cwd="/tmp")
    if done.returncode != 0 and "Permission denied" in done.stderr:
        pytest.skip(f"uid 65534 cannot run {sys.executable}: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip()) > 0


def test_the_measure_puts_the_signals_handler_back_and_leaves_nothing_pending():
    seen = []
    previous = signal.signal(signal.SIGURG, lambda signo, frame: seen.append(signo))
    try:
        assert mechanism.perf_interrupt_ns() is not None
        time.sleep(0.01)  # a signal left pending would be handled by now
        assert signal.getsignal(signal.SIGURG) is not previous and not seen
    finally:
        signal.signal(signal.SIGURG, previous)


def test_an_interruption_dearer_than_the_threshold_chooses_timers_at_their_own_rate(monkeypatch):
    # each timer sample costs a PyTorch step about 0.1 ms in a VM: 50 a second, not the tick's 250
    monkeypatch.setattr(mechanism, "perf_interrupt_ns", lambda: 29_000.0)
    chosen = mechanism.choose({})
    assert chosen.mechanism == "timer" and "29 µs" in chosen.why and "50 a second" in chosen.why
    assert chosen.environment() == {mechanism.VARIABLE: "timer", "AUTOITT_SAMPLE_HZ": "50"}


def test_a_rate_the_user_gave_is_kept_with_timers(monkeypatch):
    monkeypatch.setattr(mechanism, "perf_interrupt_ns", lambda: 29_000.0)
    chosen = mechanism.choose({}, rate_given=True)
    assert chosen.mechanism == "timer" and chosen.environment() == {mechanism.VARIABLE: "timer"}
    assert mechanism.choose({mechanism.VARIABLE: "timer"}, rate_given=True).environment() == {mechanism.VARIABLE: "timer"}


def test_timers_the_user_chose_sample_at_their_own_rate_unless_told():
    assert mechanism.choose({mechanism.VARIABLE: "timer"}).environment()["AUTOITT_SAMPLE_HZ"] == "50"


def test_a_cheap_interruption_keeps_perf_at_the_collectors_rate(monkeypatch):
    monkeypatch.setattr(mechanism, "perf_interrupt_ns", lambda: 1_500.0)
    chosen = mechanism.choose({})
    # 1000 a second; should the run find perf refused (a container's seccomp), its timers at their own rate
    assert chosen.mechanism == "perf"
    assert chosen.environment() == {mechanism.VARIABLE: "perf", "AUTOITT_SAMPLE_TIMER_HZ": "50"}
    assert mechanism.choose({}, rate_given=True).environment() == {mechanism.VARIABLE: "perf"}


def test_where_it_cannot_be_measured_the_collector_tries_perf_first(monkeypatch):
    monkeypatch.setattr(mechanism, "perf_interrupt_ns", lambda: None)
    chosen = mechanism.choose({})
    assert chosen.mechanism == "perf" and chosen.cost_ns is None


@pytest.mark.parametrize("given", ["perf", "timer"])
def test_the_users_own_choice_is_kept_unmeasured(given, monkeypatch):
    monkeypatch.setattr(mechanism, "perf_interrupt_ns", lambda: pytest.fail("measured"))
    assert mechanism.choose({mechanism.VARIABLE: given}).mechanism == given


LOOP = """\
import torch

torch.set_num_threads(1)
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(150):
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
"""


@pytest.mark.parametrize("given", [None, "perf"])
def test_a_run_samples_with_the_mechanism_chosen_and_says_why(given, tmp_path):
    (tmp_path / "train.py").write_text(LOOP)
    env = {mechanism.VARIABLE: given} if given else {}
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    sampling = json.loads(done.stdout)["sampling"]
    chosen = json.loads((tmp_path / "out" / "run.json").read_text())["sample_mechanism"]
    assert sampling["mechanism"] == chosen["mechanism"] == (given or mechanism.choose({}).mechanism)
    assert sampling["mechanism_why"] == chosen["why"] and sampling["samples"] > 0
    # --sample-rate auto: 1000 a second with perf, 50 with timers
    assert sampling["rate_hz"] == (50 if sampling["mechanism"] == "timer" else 1000), sampling


def test_a_rate_given_is_the_rate_sampled_whatever_the_mechanism(tmp_path):
    (tmp_path / "train.py").write_text(LOOP)
    done = autoitt("profile", "--json", "--sample-rate", "250", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["sampling"]["rate_hz"] == 250


def test_a_run_without_sampling_measures_nothing(tmp_path):
    (tmp_path / "train.py").write_text(LOOP)
    done = autoitt("profile", "--json", "--sample-rate", "0", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "run.json").read_text())["sample_mechanism"] is None
