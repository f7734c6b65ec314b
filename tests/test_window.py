"""``--skip-steps``/``--steps``: collection covers exactly the chosen steps.

Runs an instrumented copy in-process with the real ittapi wrapped by the
recorder, which fails on any task begun or ended while collection is paused.
"""

from __future__ import annotations

import atexit
import textwrap

import pytest

from instrumenter.runtime import window
from instrumenter.runtime.window import CollectionWindow
from tests.itt_recorder import Recorder
from transforms import Mode, instrument_source

@pytest.fixture(autouse=True)
def fresh_windows(monkeypatch):
    """Windows share state per process (entry script and modules); each test is its own process here."""
    monkeypatch.setattr(window, "_STATES", {})


SCRIPT = textwrap.dedent(
    '''
    class Optimizer:
        def step(self):
            pass

    optimizer = Optimizer()
    seen = []

    def train(epochs, steps):
        for epoch in range(epochs):
            for step in range(steps):
                seen.append((epoch, step))
                optimizer.step()
    '''
)


def _run(monkeypatch, mode, epochs=3, steps=4):
    result = instrument_source(SCRIPT.encode(), "window_script.py", mode)
    recorder = Recorder().install(monkeypatch)
    namespace: dict = {"__name__": "window"}
    exec(compile(result.output, "window_itt.py", "exec"), namespace)
    # the at-exit warning belongs to a real run, not to the test process
    atexit.unregister(window._warn_if_never_opened)
    namespace["train"](epochs, steps)
    return recorder, namespace


def _collected_steps(recorder):
    """How many step tasks were begun inside a resume..pause span."""
    return recorder.names("begin").count("step")


def test_window_collects_exactly_the_chosen_steps_across_epochs(monkeypatch):
    recorder, ns = _run(monkeypatch, Mode(skip_steps=2, steps=5))
    recorder.assert_balanced()
    assert ns["seen"] == [(e, s) for e in range(3) for s in range(4)]  # behaviour unchanged
    assert _collected_steps(recorder) == 5
    assert recorder.names("resume") == [None] and recorder.names("pause") == [None]


def test_enclosing_tasks_are_begun_after_resume_at_the_first_collected_step(monkeypatch):
    recorder, _ = _run(monkeypatch, Mode(skip_steps=2, steps=5))
    first = recorder.calls.index(("resume", None))
    assert recorder.calls[first + 1 : first + 5] == [
        ("begin", "epoch_loop"), ("begin", "epoch"), ("begin", "step_loop"), ("begin", "step"),
    ]


def test_open_tasks_are_ended_before_the_pause_after_the_last_step(monkeypatch):
    recorder, _ = _run(monkeypatch, Mode(skip_steps=2, steps=3))
    pause = recorder.calls.index(("pause", None))
    assert recorder.calls[pause - 4 : pause] == [
        ("end", "step"), ("end", "step_loop"), ("end", "epoch"), ("end", "epoch_loop"),
    ]
    assert _collected_steps(recorder) == 3


def test_skip_only_collects_to_the_end_of_training(monkeypatch):
    recorder, _ = _run(monkeypatch, Mode(skip_steps=10))
    recorder.assert_balanced()
    assert _collected_steps(recorder) == 2


def test_steps_only_collects_from_the_first_step(monkeypatch):
    recorder, _ = _run(monkeypatch, Mode(steps=2))
    recorder.assert_balanced()
    assert _collected_steps(recorder) == 2


def test_window_beyond_the_run_collects_nothing_and_says_so(monkeypatch, capsys):
    recorder, _ = _run(monkeypatch, Mode(skip_steps=100, steps=1))
    recorder.assert_balanced()
    assert recorder.names("resume") == []
    assert recorder.names("begin") == []


def test_window_warns_at_exit_when_it_never_opened(capsys):
    class Null:
        def __getattr__(self, name):
            return lambda *args: None

    collection = CollectionWindow(Null(), skip_steps=5, steps=1, step_tasks=("step",))
    atexit.unregister(window._warn_if_never_opened)
    collection.task_begin("d", "step")
    collection.task_end("d")
    window._warn_if_never_opened(collection._s)
    assert "never opened" in capsys.readouterr().err


def test_window_copy_imports_the_window_runtime_and_keeps_marker_lines():
    output = instrument_source(SCRIPT.encode(), "window_script.py", Mode(skip_steps=2, steps=5)).output.decode()
    assert "from instrumenter.runtime.window import CollectionWindow" in output
    assert 'itt = _autoitt_CollectionWindow(itt, skip_steps=2, steps=5, step_tasks=("step",))' in output
    assert 'itt.task_begin(_autoitt_domain, "step")' in output


@pytest.mark.parametrize("bad", [dict(skip_steps=-1), dict(steps=0)])
def test_mode_rejects_impossible_windows(bad):
    with pytest.raises(ValueError):
        Mode(**bad)


THREADED = textwrap.dedent(
    '''
    class Optimizer:
        def step(self):
            barrier.wait()  # both threads step in lock-step, so the window closes amid the other's tasks

    optimizer = Optimizer()

    def train(epochs, steps):
        for epoch in range(epochs):
            for step in range(steps):
                optimizer.step()
    '''
)


def test_a_window_closing_while_another_thread_trains_pauses_after_that_threads_tasks_end(monkeypatch):
    import threading

    result = instrument_source(THREADED.encode(), "threaded.py", Mode(skip_steps=3, steps=4))
    recorder = Recorder().install(monkeypatch)
    namespace: dict = {"__name__": "threaded", "barrier": threading.Barrier(2, timeout=10)}
    exec(compile(result.output, "threaded_itt.py", "exec"), namespace)
    atexit.unregister(window._warn_if_never_opened)
    threads = [threading.Thread(target=namespace["train"], args=(3, 4)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.assert_balanced()  # and the recorder fails any task begun or ended while paused
    assert recorder.names("pause") == [None] and recorder.names("resume") == [None]
