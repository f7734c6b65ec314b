"""A call wrapped in instrumenter._around.Around (around.c): between its markers, with no frame of its own.

The C type that makes an optimizer's closure a task (instrumenter/closures.py) without the program seeing a
wrapper: no frame in its stack or tracebacks, its result and exceptions unchanged, its attributes passed through.
"""

from __future__ import annotations

import inspect
import traceback

import pytest

from instrumenter._around import Around


def test_a_wrapped_call_runs_between_its_markers_and_returns_what_the_callable_returns():
    log = []
    wrapped = Around(lambda a, b=0: log.append("call") or a + b, lambda: log.append("begin"), lambda: log.append("end"))
    assert wrapped(2, b=3) == 5
    assert log == ["begin", "call", "end"]


def test_a_wrapped_call_adds_no_frame_to_the_stack_the_callable_sees():
    def depth():
        return len(inspect.stack())

    assert Around(depth, lambda: None, lambda: None)() == depth()


def test_an_exception_from_the_callable_is_raised_as_is_after_the_end_marker_ran():
    log = []
    error = ValueError("from the closure")

    def fails():
        raise error

    with pytest.raises(ValueError) as raised:
        Around(fails, lambda: log.append("begin"), lambda: log.append("end"))()
    assert raised.value is error and log == ["begin", "end"]
    # the frames: this test's call, then the callable's; nothing between them
    assert [frame.name for frame in traceback.extract_tb(raised.tb)] == [
        "test_an_exception_from_the_callable_is_raised_as_is_after_the_end_marker_ran", "fails"]


def test_markers_that_fail_never_change_the_outcome():
    def broken():
        raise RuntimeError("a marker failed")

    assert Around(lambda: 7, broken, broken)() == 7
    with pytest.raises(KeyError):
        Around({}.__getitem__, broken, broken)("missing")


def test_attributes_and_repr_are_the_callables():
    def closure():
        """The user's closure."""

    closure.seen = 3
    wrapped = Around(closure, lambda: None, lambda: None)
    assert (wrapped.__name__, wrapped.__doc__, wrapped.seen, repr(wrapped)) == (
        "closure", "The user's closure.", 3, repr(closure))


def test_only_callables_are_wrapped():
    with pytest.raises(TypeError):
        Around(3, lambda: None, lambda: None)
