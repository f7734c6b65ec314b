"""Choosing a backend: one object, chosen once by ``profile``, found again by name by ``report``.

The VTune case uses the stand-in of ``tests/vtune_standin`` (VTune itself
cannot be installed on these machines; the stand-in follows its documented CLI).
"""

from __future__ import annotations

import json

import pytest

from instrumenter.builtin import BuiltinBackend
from instrumenter.cli.profiling import BACKENDS, choose_backend, load
from instrumenter.vtune import VTuneBackend
from tests.conftest import ROOT
from transforms import SourceError

STANDIN = ROOT / "tests" / "vtune_standin"


@pytest.fixture
def no_vtune(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("VTUNE_PROFILER_DIR", raising=False)
    monkeypatch.delenv("ONEAPI_ROOT", raising=False)


def test_auto_is_the_builtin_collector_without_vtune(no_vtune):
    backend, why = choose_backend("auto")
    assert isinstance(backend, BuiltinBackend) and "no vtune" in why


def test_auto_is_vtune_when_it_is_on_the_path(monkeypatch):
    monkeypatch.setenv("PATH", str(STANDIN))
    backend, why = choose_backend("auto")
    assert isinstance(backend, VTuneBackend) and str(STANDIN / "vtune") in why


def test_asking_for_vtune_without_it_is_an_input_error(no_vtune):
    with pytest.raises(SourceError, match="install Intel VTune Profiler or use --backend builtin"):
        choose_backend("vtune")


def test_asking_for_the_builtin_collector_never_looks_for_vtune(monkeypatch):
    monkeypatch.setenv("PATH", str(STANDIN))
    assert isinstance(choose_backend("builtin")[0], BuiltinBackend)


def test_every_backend_is_found_by_the_name_run_json_records():
    assert {name: backend.name for name, backend in BACKENDS.items()} == {"builtin": "builtin", "vtune": "vtune"}


def test_a_result_folder_of_an_unknown_backend_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"script": "t.py", "copy": "t_itt.py", "args": [],
                                                   "backend": "perf", "command": []}))
    with pytest.raises(SourceError, match="unknown backend 'perf'"):
        load(tmp_path)


def test_a_folder_that_is_not_a_result_folder_is_refused(tmp_path):
    with pytest.raises(SourceError, match="not an autoitt result folder"):
        load(tmp_path)


def test_a_result_folder_of_an_earlier_autoitt_says_so(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"script": "t.py", "copy": "t_itt.py", "args": [], "backend": "builtin",
                                                   "command": [], "domain": "autoitt.t", "step_labels": ["step"],
                                                   "start_paused": True, "domains": []}))
    with pytest.raises(SourceError, match="earlier autoitt .*autoitt profile t.py"):
        load(tmp_path)


def test_the_command_line_offers_every_backend_and_auto():
    from instrumenter.profile.options import BACKENDS as CHOICES

    assert set(CHOICES) == {"auto", *BACKENDS}
