"""Bad input to ``autoitt profile`` is a clear exit 2 that leaves nothing behind; odd names are no bug."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import invoke, snapshot
from tests.test_profile import autoitt

STEP_LOOP = "class Loss:\n    def backward(self):\n        pass\n\n\nfor step in range(2):\n    Loss().backward()\n"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_syntax_error_leaves_no_result_folder(work):
    (work / "bad.py").write_text("for x in y\n    pass\n")
    before = snapshot(work)
    result = invoke("profile", "--backend", "builtin", "bad.py")
    assert result.exit_code == 2
    assert "bad.py:1: syntax error" in result.stderr
    assert snapshot(work) == before


def test_a_notebook_is_refused_until_notebooks_are_supported(work):
    (work / "nb.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    for command in (["profile", "--backend", "builtin"], ["instrument"], ["loops"]):
        result = invoke(*command, "nb.ipynb")
        assert result.exit_code == 2
        assert "is a Jupyter notebook" in result.stderr and "nbconvert --to script" in result.stderr
    assert sorted(p.name for p in work.iterdir()) == ["nb.ipynb"]


def test_a_file_where_the_results_go_is_an_input_error(work):
    (work / "train.py").write_text(STEP_LOOP)
    (work / "autoitt-results").write_text("mine\n")
    result = invoke("profile", "--backend", "builtin", "train.py")
    assert result.exit_code == 2
    assert "autoitt-results: is a file" in result.stderr and "-r" in result.stderr
    result = invoke("profile", "--backend", "builtin", "-r", "autoitt-results", "train.py")
    assert result.exit_code == 2
    assert "is a file, not a folder" in result.stderr
    assert (work / "autoitt-results").read_text() == "mine\n"


@pytest.mark.parametrize("name", ["a\nb.py", "c\udcff.py", "é train.py"], ids=["newline", "undecodable", "unicode-space"])
def test_odd_file_names_are_profiled(work, name):
    (work / name).write_text(STEP_LOOP)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", name, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["steps"][0]["count"] == 2
    copy = next((work / "out").glob("*_itt.py")).read_bytes()
    assert copy.count(b"\n# autoitt: instrumented copy of ") == 1  # one comment line, whatever the name
