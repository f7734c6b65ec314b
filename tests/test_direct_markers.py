"""The copies' markers (instrumenter/runtime/markers.c) call ITT's pointers themselves only where ittapi's own
functions would have been called with ittapi's own objects: a wrapper on ``ittapi.native`` is always called, and
anything ittapi would refuse still reaches ittapi to be refused. The real ``ittapi.native``: in this process with
no collector (its ITT calls do nothing), and in a subprocess with the built-in collector attached."""

from __future__ import annotations

import types

import ittapi.compat
import ittapi.native
import pytest

from instrumenter.runtime.extensions import load
from tests.test_collector import only_trace, run_target, tasks


def markers(native=ittapi.native):
    return load("_markers").Markers(native, {}, None)


@pytest.fixture
def domain():
    return ittapi.compat.domain_create("test.direct_markers")


def recording(monkeypatch, calls):
    """Wraps ittapi.native's task_begin and task_end, as the tests' ITT recorder (tests/itt_recorder.py) does."""
    begin, end = ittapi.native.task_begin, ittapi.native.task_end

    def task_begin(domain, handle):
        calls.append(("begin", str(handle)))
        begin(domain, handle)

    def task_end(domain):
        calls.append(("end", None))
        end(domain)

    monkeypatch.setattr(ittapi.native, "task_begin", task_begin)
    monkeypatch.setattr(ittapi.native, "task_end", task_end)


def test_the_markers_find_the_direct_path_in_the_installed_ittapi():
    # ittapi's layout (domain.hpp, string_handle.hpp) and its exported ITT pointers: found, or every step pays
    # ittapi's argument parsing again
    assert markers().direct is True


def test_the_collector_receives_every_task_of_the_direct_path_as_ittapi_would_send_it(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        from instrumenter.runtime.collection import markers
        marks = markers()
        assert marks.direct
        d = itt.domain_create("w")
        marks.task_begin(d, "step"); marks.task_begin(d, "forward"); marks.task_end(d); marks.task_end(d)
        itt.pause()
        marks.task_begin(d, "paused"); marks.task_end(d)
        itt.resume()
        itt.task_begin(d, "compat"); marks.task_begin(d, "step"); marks.task_end(d); itt.task_end(d)
    """)
    assert tasks(only_trace(traces)) == [
        ("begin", "w", "step"), ("begin", "w", "forward"), ("end", "w", None), ("end", "w", None),
        ("pause", None, None), ("resume", None, None),
        ("begin", "w", "compat"), ("begin", "w", "step"), ("end", "w", None), ("end", "w", None),
    ]


def test_a_pair_on_the_direct_path_runs_without_a_collector(domain):
    marks = markers()
    for _ in range(3):
        assert marks.task_begin(domain, "step") is None
        assert marks.task_end(domain) is None


def test_a_wrapper_installed_after_the_markers_were_made_is_called(monkeypatch, domain):
    marks = markers()
    calls = []
    recording(monkeypatch, calls)
    marks.task_begin(domain, "step")
    marks.task_end(domain)
    assert calls == [("begin", "step"), ("end", None)]


def test_a_wrapper_installed_before_the_markers_were_made_is_called(monkeypatch, domain):
    calls = []
    recording(monkeypatch, calls)
    marks = markers()
    assert marks.direct is False
    marks.task_begin(domain, "step")
    marks.task_end(domain)
    assert calls == [("begin", "step"), ("end", None)]


def test_the_direct_path_comes_back_when_the_wrapper_is_removed(monkeypatch, domain):
    marks = markers()
    calls = []
    with monkeypatch.context() as patch:
        recording(patch, calls)
        marks.task_begin(domain, "step")
    marks.task_end(domain)  # ittapi's own task_end again: not recorded
    assert calls == [("begin", "step")]


def test_a_domain_that_is_not_ittapis_is_refused_by_ittapi_as_the_markers_error():
    with pytest.raises(TypeError) as raised:
        markers().task_begin(object(), "step")
    assert raised.value._autoitt_marker is True
    with pytest.raises(TypeError):
        markers().task_end("not a domain")


def test_a_look_alike_of_ittapi_native_gets_no_direct_path_and_its_functions_are_called():
    calls = []
    native = types.SimpleNamespace(StringHandle=lambda name: f"handle:{name}",
                                   task_begin=lambda domain, handle: calls.append((domain, handle)),
                                   task_end=lambda domain: calls.append((domain, None)))
    marks = markers(native)
    assert marks.direct is False
    marks.task_begin("d", "step")
    marks.task_end("d")
    assert calls == [("d", "handle:step"), ("d", None)]
