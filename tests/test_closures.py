"""An optimizer's closure becomes a task, and the program cannot tell (instrumenter/runtime/closures.py).

The hook is tested in-process with real torch optimizers (its wrapper,
instrumenter.runtime._around.Around, in tests/test_around.py): it is registered on one optimizer
(``register_step_pre_hook``, the same signature as the global hook the copies
register), so the test process's torch is left as it was; the ITT calls go to
a recorder. The last test runs a real script under ``autoitt profile`` and
under plain python and compares what its closure sees of its own stack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from instrumenter.runtime import closures
from tests.test_profile import autoitt


class Recorder:
    """Stands in for ``torch._C._itt``: what the markers were asked to do, in order."""

    def __init__(self, log):
        self.log = log

    def rangePush(self, name):
        self.log.append(("begin", name))

    def rangePop(self):
        self.log.append("end")


torch = pytest.importorskip("torch")


class Seen(torch.optim.SGD):
    """SGD that keeps the closure its step was given."""

    def step(self, closure=None):
        self.given = closure
        return super().step(closure)


@pytest.fixture(autouse=True)
def no_global_hooks(monkeypatch):
    """A test process's torch as a script's starts: without the global hook an earlier test's runtime (a
    Collection resumed in-process) may have registered, which would mark the closures first."""
    from torch.optim import optimizer

    monkeypatch.setattr(optimizer, "_global_optimizer_pre_hooks", type(optimizer._global_optimizer_pre_hooks)())


def optimizer_with_the_hook(kind=torch.optim.LBFGS, **options):
    log = []
    model = torch.nn.Linear(4, 1)
    optimizer = kind(model.parameters(), lr=0.1, **options)
    optimizer.register_step_pre_hook(closures._hook(torch, Recorder(log)))

    def closure():
        log.append("closure")
        optimizer.zero_grad()
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        return loss

    return optimizer, closure, log


def test_under_a_profiler_each_closure_call_is_a_task():
    optimizer, closure, log = optimizer_with_the_hook(max_iter=3)
    with torch.autograd.profiler.emit_itt():
        optimizer.step(closure)
    assert log.count("closure") >= 2  # LBFGS calls it again as it iterates
    assert log == [("begin", closures.CLOSURE_TASK), "closure", "end"] * log.count("closure")


def test_a_closure_given_by_keyword_is_a_task_too():
    optimizer, closure, log = optimizer_with_the_hook(Seen)
    with torch.autograd.profiler.emit_itt():
        optimizer.step(closure=closure)
    assert log == [("begin", closures.CLOSURE_TASK), "closure", "end"]


def test_without_a_profiler_the_optimizer_gets_the_closure_itself():
    optimizer, closure, log = optimizer_with_the_hook(Seen)
    optimizer.step(closure)
    assert optimizer.given is closure and log == ["closure"]


def test_a_step_without_a_closure_is_left_alone():
    optimizer, _closure, log = optimizer_with_the_hook(Seen)
    with torch.autograd.profiler.emit_itt():
        optimizer.step()
    assert optimizer.given is None and log == []


def test_a_closure_passed_on_to_another_optimizer_is_one_task():
    # an optimizer that wraps another (ZeroRedundancyOptimizer, Lightning's) hands the same closure down
    inner, closure, log = optimizer_with_the_hook(Seen)
    outer_model = torch.nn.Linear(1, 1)

    class Outer(torch.optim.SGD):
        def step(self, closure=None):
            return inner.step(closure)

    outer = Outer(outer_model.parameters(), lr=0.1)
    outer.register_step_pre_hook(closures._hook(torch, Recorder(log)))
    with torch.autograd.profiler.emit_itt():
        outer.step(closure)
    assert log == [("begin", closures.CLOSURE_TASK), "closure", "end"]


def run_python(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@pytest.mark.slow
def test_the_hook_is_registered_once_per_process_and_only_where_the_script_imported_torch():
    assert run_python("""
import sys
from instrumenter.runtime import closures
print(closures.install(), "torch" in sys.modules)
import torch.optim.optimizer as optimizer
print(closures.install(), closures.install(), len(optimizer._global_optimizer_pre_hooks))
""") == ["False", "False", "True", "True", "1"]


#: A closure that looks at its own stack and raises on its third call; what it saw is written to seen.txt.
SEES_ITS_STACK = """
import os, traceback, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=5)
seen = []
calls = 0

def inner_frames(frames):
    names = [(os.path.basename(f.filename), f.name) for f in frames]
    start = max(i for i, (file, name) in enumerate(names) if name == "<module>")
    return names[start:]

def closure():
    global calls
    calls += 1
    if calls == 1:
        seen.append(inner_frames(traceback.extract_stack()))
    if calls == 3:
        raise ValueError("third call")
    optimizer.zero_grad()
    loss = model(torch.ones(8, 4)).pow(2).sum()
    loss.backward()
    return loss

for step in range(2):
    try:
        optimizer.step(closure)
    except ValueError as error:
        seen.append(inner_frames(traceback.extract_tb(error.__traceback__)))
with open("seen.txt", "w") as out:
    out.write(repr(seen))
"""


@pytest.mark.slow
def test_a_closure_sees_the_same_stack_and_traceback_as_without_autoitt(tmp_path):
    plain, profiled = tmp_path / "plain", tmp_path / "profiled"
    for folder in (plain, profiled):
        folder.mkdir()
        (folder / "train.py").write_text(SEES_ITS_STACK)
    done = subprocess.run([sys.executable, "train.py"], cwd=plain, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=profiled)
    assert done.returncode == 0, done.stderr[-3000:]
    assert closures.CLOSURE_TASK in {task["name"] for task in json.loads(done.stdout)["tasks"]}  # it was wrapped
    expected = (plain / "seen.txt").read_text()
    assert "closure" in expected and "third call" not in expected
    assert (profiled / "seen.txt").read_text() == expected


@pytest.mark.slow
def test_marking_closures_leaves_a_users_own_instrumenter_module_theirs(tmp_path):
    # the runtime is loaded by path, without autoitt's package: a script's own `instrumenter` stays its own
    (tmp_path / "instrumenter.py").write_text("WHO = 'the user instrumenter'\n")
    (tmp_path / "train.py").write_text(SEES_ITS_STACK.replace("import os, traceback, torch",
                                                              "import os, traceback, torch, instrumenter") +
                                       "print(instrumenter.WHO)\n")
    # the console script, as users run it: `python -m instrumenter` here would run the user's module
    done = subprocess.run([str(Path(sys.executable).with_name("autoitt")), "profile", "--json", "-r", "out", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the user instrumenter" in done.stderr
    assert closures.CLOSURE_TASK in {task["name"] for task in json.loads(done.stdout)["tasks"]}
