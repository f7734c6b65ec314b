"""Training regions that run at the same time (threads) or re-enter (generators, coroutines, recursion).

Collection runs while any region runs, in any thread, and a region re-entered
on a thread where PyTorch's profiler already runs does not enter emit_itt again
(it would raise). Real runs with the built-in collector and real torch.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from instrumenter.runtime import collection
from tests.test_profile import autoitt
from transforms import instrument_source

pytestmark = pytest.mark.slow

THREADS = textwrap.dedent(
    """\
    import threading
    import time

    import torch

    model = torch.nn.Linear(4, 1)


    def train(steps, pause):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(steps):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()
            time.sleep(pause)


    workers = [threading.Thread(target=train, args=(20, 0.001)), threading.Thread(target=train, args=(60, 0.003))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print("done")
    """
)


def _profile(tmp_path, script: str, name: str = "train.py"):
    (tmp_path / name).write_text(script)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


def test_two_threads_training_at_once_are_both_recorded_whole(tmp_path):
    summary, _ = _profile(tmp_path, THREADS)
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 80)]
    assert summary["threads"] >= 2
    assert all(task["share"] <= 1.0 + 1e-9 for task in summary["tasks"] if task["domain"].startswith("autoitt"))


GENERATORS = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


    def steps(n):
        for step in range(n):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()
            yield step


    first, second = steps(3), steps(3)
    print(list(zip(first, second)))
    # zip stops at first's end, second held inside its last step: finished here, not by the interpreter's shutdown,
    # whose order of finalizing a generator and clearing the globals its finally uses varies with what is installed
    print(list(second))
    """
)

COROUTINES = textwrap.dedent(
    """\
    import asyncio

    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


    async def train(n):
        for step in range(n):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()
            await asyncio.sleep(0)
        return n


    async def main():
        print(await asyncio.gather(train(3), train(4)))


    asyncio.run(main())
    """
)

RECURSION = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


    def train(depth):
        for step in range(2):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()
            if depth:
                train(depth - 1)
        return depth


    print(train(2))
    """
)

OWN_PROFILER = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


    def train():
        for step in range(3):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()


    profiler = getattr(torch, "autograd").profiler.profile  # the script's own, out of autoitt's sight
    with profiler():
        train()
    print("done")
    """
)


@pytest.mark.parametrize("script, steps", [(GENERATORS, 6), (COROUTINES, 7), (RECURSION, 14), (OWN_PROFILER, 3)],
                         ids=["generators", "coroutines", "recursion", "own-profiler"])
def test_a_region_reentered_on_its_thread_runs_as_the_original_does(tmp_path, python, script, steps):
    import subprocess

    (tmp_path / "original.py").write_text(script)
    original = subprocess.run([python, "original.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert original.returncode == 0, original.stderr
    summary, stderr = _profile(tmp_path, script)
    assert original.stdout in stderr  # with --json the script's output goes to stderr
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", steps)]


def test_a_region_reentered_by_recursion_keeps_every_share_within_thread_time(tmp_path):
    """train(3) runs its step loop inside its own step loop three levels deep: each level's time counts once."""
    summary, _ = _profile(tmp_path, RECURSION.replace("print(train(2))", "print(train(3))"))
    assert all(task["share"] <= 1.0 + 1e-9 for task in summary["tasks"]), summary["tasks"]
    loop = next(task for task in summary["tasks"] if task["name"] == "step_loop")
    assert loop["count"] == 15 and loop["total_s"] == loop["max_s"]  # the outermost loop holds the others


def test_a_task_name_gets_one_string_handle_however_often_it_begins(monkeypatch):
    import ittapi.compat
    import ittapi.native

    made = []
    real = ittapi.native.StringHandle
    monkeypatch.setattr(collection, "_handles", {})
    monkeypatch.setattr(ittapi.native, "StringHandle", lambda name: made.append(name) or real(name))
    code = compile(instrument_source(b"for step in range(1000):\n    loss.backward()\n", "t.py").output, "t", "exec")

    class Loss:
        def backward(self):
            pass

    exec(code, {"loss": Loss()})
    assert sorted(made) == ["step", "step_loop"]
