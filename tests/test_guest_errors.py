"""Whose an error is: autoitt's runtime swallows its own errors and never the program's (instrumenter/runtime/guest.py).

A KeyboardInterrupt, a SystemExit, or whatever the program's signal handler raised while autoitt's code ran
reaches the program as without autoitt; an error of autoitt's own never does. The rule is checked where it is
kept: ``guest.programs``, the copies' markers (markers.c), the closure wrappers (around.c), and a real run whose
signal lands inside the runtime.
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
import types

import ittapi.compat
import ittapi.native
import pytest

from instrumenter.runtime.extensions import load
from instrumenter.runtime.guest import programs
from tests.test_profile import autoitt

# loaded as the runtime loads them, which hands them guest.programs
Around, Guarded, Rebound = (getattr(load("_around"), name) for name in ("Around", "Guarded", "Rebound"))


class Timeout(Exception):
    """What a program's SIGALRM handler raises to stop work that took too long: an Exception, yet the program's."""


def _caught(fn) -> BaseException:
    try:
        fn()
    except BaseException as error:  # noqa: B902 - the test looks at what was raised
        return error
    raise AssertionError("nothing was raised")


@pytest.fixture
def alarm_raises():
    """SIGALRM's handler raises :class:`Timeout` (the program's); the handler before it is put back."""
    def handler(_signum, _frame):
        raise Timeout("the step took too long")

    before = signal.signal(signal.SIGALRM, handler)
    yield
    signal.signal(signal.SIGALRM, before)


def _raise(error):
    def raising(*_args, **_kwargs):
        raise error
    return raising


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(143), GeneratorExit()])
def test_what_is_not_an_exception_is_the_programs(error):
    assert programs(error)


def test_an_exception_of_autoitts_own_code_is_autoitts():
    assert not programs(_caught(lambda: {}["missing"]))


def test_an_exception_the_programs_signal_handler_raised_is_the_programs(alarm_raises):
    assert programs(_caught(lambda: signal.raise_signal(signal.SIGALRM)))


def test_the_same_exception_raised_outside_a_handler_is_autoitts(alarm_raises):
    assert not programs(_caught(_raise(Timeout("not from a handler"))))


# The copies' markers (markers.c) with a toggle whose Python raises: the toggle's own error is swallowed, the
# program's is raised from the marker, and task_end ends its task before raising.

def _toggle(**methods):
    toggle = types.SimpleNamespace(fast_reject=types.SimpleNamespace(every=1, until=0, later=1, ranges_end=0),
                                   _counters={"step": itertools.count(1)}, entered_threads=1,
                                   begin_numbered=lambda name, number: None, end=lambda: None)
    for name, method in methods.items():
        setattr(toggle, name, method)
    return toggle


def _markers(toggle, native=ittapi.native):
    return load("_markers").Markers(native, {}, toggle)


@pytest.fixture
def domain():
    return ittapi.compat.domain_create("test.guest_errors")


def test_a_toggle_that_fails_never_changes_what_task_begin_does(domain):
    assert _markers(_toggle(begin_numbered=_raise(RuntimeError("autoitt's bug")))).task_begin(domain, "step") is None


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(143)])
def test_task_begin_raises_the_programs_error_from_the_toggle(domain, error):
    markers = _markers(_toggle(begin_numbered=_raise(error)))
    assert _caught(lambda: markers.task_begin(domain, "step")) is error
    assert not hasattr(error, "_autoitt_marker")  # the launcher would call it a bug in autoitt


def test_task_begin_raises_what_the_programs_handler_raised_inside_the_toggle(domain, alarm_raises):
    markers = _markers(_toggle(begin_numbered=lambda name, number: signal.raise_signal(signal.SIGALRM)))
    assert isinstance(_caught(lambda: markers.task_begin(domain, "step")), Timeout)


def test_task_end_ends_its_task_then_raises_the_programs_error(domain):
    ended = []
    native = types.SimpleNamespace(task_begin=ittapi.native.task_begin, StringHandle=ittapi.native.StringHandle,
                                   task_end=lambda d: ended.append(d))
    markers = _markers(_toggle(end=_raise(KeyboardInterrupt())), native)
    assert isinstance(_caught(lambda: markers.task_end(domain)), KeyboardInterrupt)
    assert ended == [domain]


def test_a_toggle_that_fails_never_changes_what_task_end_does(domain):
    assert _markers(_toggle(end=_raise(RuntimeError("autoitt's bug")))).task_end(domain) is None


# The closure wrappers (around.c)

def test_a_begin_marker_interrupted_by_the_program_skips_the_call_and_still_ends():
    log = []
    wrapped = Around(lambda: log.append("call"), _raise(KeyboardInterrupt()), lambda: log.append("end"))
    assert isinstance(_caught(wrapped), KeyboardInterrupt)
    assert log == ["end"]


def test_an_end_marker_interrupted_by_the_program_raises_in_place_of_the_result():
    assert isinstance(_caught(Around(lambda: 7, lambda: None, _raise(SystemExit(3)))), SystemExit)


def test_an_end_marker_interrupted_while_the_call_raised_chains_the_calls_error():
    error = _caught(Around(_raise(ValueError("the closure's")), lambda: None, _raise(KeyboardInterrupt())))
    assert isinstance(error, KeyboardInterrupt) and isinstance(error.__context__, ValueError)


def test_a_rebind_interrupted_by_the_program_raises_and_the_call_is_not_made():
    log = []
    assert isinstance(_caught(Rebound(lambda: log.append("call"), _raise(KeyboardInterrupt()))), KeyboardInterrupt)
    assert log == []


def test_a_guarded_hook_raises_the_programs_error_and_swallows_its_own(alarm_raises):
    assert isinstance(_caught(Guarded(lambda: True, lambda: signal.raise_signal(signal.SIGALRM))), Timeout)
    assert Guarded(lambda: True, _raise(RuntimeError("autoitt's bug")))() is None


# A real run: the program's SIGALRM handler raises while autoitt's runtime records an iteration's operators.
# The script raises the signal from inside the runtime's call of torch's emit_itt (the iterations the default
# --torch-ops sampled records), so the handler runs there every time, not by chance.

PROBE = """
import signal, sys, torch
torch.manual_seed(0)

class Timeout(Exception):
    pass

RAISES = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": lambda: SystemExit(143), "Timeout": Timeout}
def handler(signum, frame):
    raise RAISES[sys.argv[1]]()
signal.signal(signal.SIGALRM, handler)

enter = torch.autograd.profiler.emit_itt.__enter__
def entering(self):  # what the runtime calls to record an iteration's operators: the signal lands in there
    if step >= 20:
        signal.raise_signal(signal.SIGALRM)
    return enter(self)
torch.autograd.profiler.emit_itt.__enter__ = entering

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)
try:
    for step in range(3000):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
except (KeyboardInterrupt, Timeout) as error:
    print("stopped by", type(error).__name__, "at step", step)
    sys.exit(7)
print("ran all 3000 steps")
"""


@pytest.mark.slow
@pytest.mark.parametrize("raised, returncode", [("KeyboardInterrupt", 7), ("Timeout", 7), ("SystemExit", 143)])
def test_a_signal_handlers_error_inside_the_runtime_stops_the_program_as_it_would_stop_it_plain(
        tmp_path, raised, returncode):
    (tmp_path / "train.py").write_text(PROBE)
    done = autoitt("profile", "--json", "-r", "out", "train.py", raised, cwd=tmp_path)
    printed = done.stderr  # with --json, the script's own output goes to stderr
    assert done.returncode == returncode, printed[-3000:]
    assert "ran all 3000 steps" not in printed
    if returncode == 7:
        assert f"stopped by {raised} at step" in printed
