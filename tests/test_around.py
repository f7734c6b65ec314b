"""Calls wrapped by instrumenter.runtime._around (around.c), with no frame of their own.

``Around``: between its markers; it makes an optimizer's closure a task (instrumenter/runtime/closures.py) without the
program seeing a wrapper: no frame in its stack or tracebacks, its result and exceptions unchanged, its
attributes passed through. ``Rebound``: called with the arguments another function made; it joins autoitt's
callback to a Keras fit's (instrumenter/runtime/libraries.py) with no frame of autoitt's under the fit.
``Guarded``: called only where a check says so; autoitt's global optimizer step pre-hook, which PyTorch calls at
every step, runs no Python where no profiler is on.
"""

from __future__ import annotations

import inspect
import traceback

import pytest

from instrumenter.runtime._around import Around, Guarded, Rebound


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
    assert wrapped.__wrapped__ is closure and inspect.signature(wrapped) == inspect.signature(closure)


def test_only_callables_are_wrapped():
    with pytest.raises(TypeError):
        Around(3, lambda: None, lambda: None)


def _fit(x, epochs=1, callbacks=None):
    """A stand-in for a library's fit: what it was called with, and the stack depth it runs at."""
    return x, epochs, callbacks, len(inspect.stack())


def test_a_rebound_call_gets_the_arguments_its_rebind_made_and_adds_no_frame():
    rebound = Rebound(_fit, lambda x, **kw: ((x,), {**kw, "callbacks": [*(kw.get("callbacks") or ()), "ours"]}))
    assert rebound(1, epochs=2, callbacks=["theirs"]) == (1, 2, ["theirs", "ours"], _fit(0)[3])


def test_a_rebind_that_fails_or_says_none_leaves_the_call_as_it_is():
    def fails(*args, **kwargs):
        raise TypeError("not the call it expected")

    for rebind in (fails, lambda *a, **k: None, lambda *a, **k: ("not", "a call")):
        assert Rebound(_fit, rebind)(1, epochs=3) == (1, 3, None, _fit(0)[3])


def test_what_the_rebound_callable_raises_is_raised_as_is():
    def raises(x):
        raise KeyError(x)

    with pytest.raises(KeyError) as raised:
        Rebound(raises, lambda *a, **k: None)("key")
    assert [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)][-1] == "raises"


def test_a_rebound_callables_attributes_signature_and_repr_are_its_own():
    rebound = Rebound(_fit, lambda *a, **k: None)
    assert (rebound.__name__, rebound.__wrapped__, repr(rebound)) == ("_fit", _fit, repr(_fit))
    assert inspect.signature(rebound) == inspect.signature(_fit)


def test_a_guarded_call_runs_only_where_its_check_is_true_and_otherwise_returns_none():
    log, on = [], [False]
    guarded = Guarded(lambda: on[0], lambda *args, **kwargs: log.append((args, kwargs)) or "made")
    assert guarded(1, k=2) is None and log == []
    on[0] = True
    assert guarded(1, k=2) == "made" and log == [((1,), {"k": 2})]


def test_a_guarded_call_that_fails_returns_none_and_raises_nothing():
    def broken(*_args):
        raise RuntimeError("the hook failed")

    assert Guarded(lambda: True, broken)(1) is None
    assert Guarded(broken, lambda: "never")() is None
    with pytest.raises(TypeError):
        Guarded(lambda: True, "not callable")
