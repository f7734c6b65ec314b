"""Markers stay balanced on every way out of a loop, and exceptions pass through unchanged.

The instrumented code runs in-process with the real ``ittapi`` (no collector);
:class:`tests.itt_recorder.Recorder` wraps its calls and checks the rules
VTune relies on: begin/end pairs match per thread, no task is begun or ended
while collection is paused, and collection is paused again afterwards.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.itt_recorder import Recorder
from transforms import Mode, Outcome, instrument_source

SCRIPT = textwrap.dedent(
    '''
    class Optimizer:
        def step(self):
            pass

    optimizer = Optimizer()

    def train(steps, mode):
        for epoch in range(2):
            for step in range(steps):
                if mode == "continue" and step == 1:
                    continue
                if mode == "break" and step == 2:
                    break
                if mode == "return" and step == 2:
                    return "early"
                if mode == "raise" and step == 2:
                    raise ValueError("boom at step 2")
                optimizer.step()
        return "done"

    def train_until(limit):
        step = 0
        while True:
            step += 1
            optimizer.step()
            if step >= limit:
                break
        return step

    def train_generator(steps):
        for step in range(steps):
            optimizer.step()
            yield step
    '''
)


def _load(monkeypatch, mode: Mode = Mode()):
    result = instrument_source(SCRIPT.encode(), "balance.py", mode)
    assert result.outcome is Outcome.INSTRUMENTED
    recorder = Recorder().install(monkeypatch)
    namespace: dict = {"__name__": "balance", "__output__": result.output.decode()}
    exec(compile(result.output, "balance_itt.py", "exec"), namespace)
    return recorder, namespace


def test_every_loop_of_the_script_is_instrumented():
    result = instrument_source(SCRIPT.encode(), "balance.py")
    roles = sorted((r.function, r.role) for r in result.detection.regions)
    assert roles == [("train", "epoch"), ("train", "step"), ("train_generator", "step"), ("train_until", "step")]


@pytest.mark.parametrize("mode", ["normal", "continue", "break", "return"])
def test_markers_balance_through_control_flow(monkeypatch, mode):
    recorder, ns = _load(monkeypatch)
    expected = "early" if mode == "return" else "done"
    assert ns["train"](4, mode) == expected
    recorder.assert_balanced()
    assert recorder.names("resume") == [None] and recorder.names("pause") == [None]


def test_step_count_matches_iterations_run(monkeypatch):
    recorder, ns = _load(monkeypatch)
    ns["train"](4, "continue")
    assert recorder.names("begin").count("train.step") == 2 * 4
    assert recorder.names("begin").count("epoch") == 2


def test_break_ends_the_step_then_the_loop(monkeypatch):
    recorder, ns = _load(monkeypatch)
    ns["train"](4, "break")
    recorder.assert_balanced()
    # steps 0, 1 and the breaking step 2, in each of the two epochs
    assert recorder.names("begin").count("train.step") == 2 * 3


def test_exception_propagates_unchanged_and_markers_balance(monkeypatch):
    recorder, ns = _load(monkeypatch)
    with pytest.raises(ValueError, match="^boom at step 2$") as info:
        ns["train"](4, "raise")
    recorder.assert_balanced()
    # the traceback still ends in the user's own raise statement
    tb = info.value.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert ns["__output__"].splitlines()[tb.tb_lineno - 1].strip() == 'raise ValueError("boom at step 2")'


def test_while_true_with_break_balances(monkeypatch):
    recorder, ns = _load(monkeypatch)
    assert ns["train_until"](3) == 3
    recorder.assert_balanced()
    assert recorder.names("begin").count("train_until.step") == 3


def test_generator_closed_early_balances(monkeypatch):
    recorder, ns = _load(monkeypatch)
    generator = ns["train_generator"](10)
    assert next(generator) == 0
    assert next(generator) == 1
    generator.close()
    recorder.assert_balanced()


def test_generator_run_to_the_end_balances(monkeypatch):
    recorder, ns = _load(monkeypatch)
    assert list(ns["train_generator"](3)) == [0, 1, 2]
    recorder.assert_balanced()


def test_pt_regions_mark_each_step(monkeypatch):
    recorder, ns = _load(monkeypatch, Mode(pt_regions=True))
    ns["train"](3, "normal")
    recorder.assert_balanced()
    assert len(recorder.names("pt_begin")) == len(recorder.names("pt_end")) == 2 * 3
