"""Jupyter notebooks: ``loops``, ``instrument`` (``--diff``, ``--check``), ``strip`` and ``profile`` take a .ipynb.

The notebook of issue 14 (``tests/inputs/notebook.ipynb``: a markdown cell, a
shell escape, a line magic, a training cell of 2 epochs x 4 steps, an eval
cell) goes through every command with real nbformat, IPython, libcst and, for
``profile``, the real built-in collector.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from instrumenter.sources import ipython_syntax
from instrumenter.profile.instrumentation import Instrumentation
from instrumenter.vtune.csv_reports import FunctionRow
from instrumenter.vtune.read import source_mapper
from tests.cli_helpers import invoke, snapshot
from tests.test_profile import autoitt

NOTEBOOK = Path(__file__).parent / "inputs" / "notebook.ipynb"
#: A training loop under IPython's most common cell magic.
TIMED_TRAINING = textwrap.dedent("""\
    %%time
    import torch
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        model(torch.ones(2)).sum().backward()
        optimizer.step()""")


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(NOTEBOOK, tmp_path / "nb.ipynb")
    return tmp_path


@pytest.fixture
def without_ipython(monkeypatch):
    """As where IPython is not installed: the translation falls back to no-ops."""
    monkeypatch.setattr(ipython_syntax, "_transformer", lambda: None)


def write_notebook(path: Path, *cells) -> Path:
    nbformat.write(new_notebook(cells=list(cells)), str(path))
    return path


def loops_json(path="nb.ipynb"):
    result = invoke("loops", "--json", str(path))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def said(result) -> str:
    """A command's stdout with rich's line wrapping undone."""
    return " ".join(result.stdout.split())


def code_sources(path: Path):
    return [cell.source for cell in nbformat.read(str(path), as_version=4).cells if cell.cell_type == "code"]


# -- loops ---------------------------------------------------------------------------------------------------------

def test_loops_finds_the_step_loop_with_its_cell_and_the_line_in_it(work):
    step = next(region for region in loops_json() if region["role"] == "step")
    assert step["cell"] == {"index": 4, "id": "train"}
    assert (step["line"], step["end_line"]) == (6, 10)  # `for x, y in batches:` in the training cell


def test_loops_json_keeps_the_script_fields_and_adds_cell(work):
    regions = loops_json()
    assert [r["role"] for r in regions] == ["epoch", "step", "eval"]
    assert all(set(r) == {"line", "end_line", "role", "function", "label", "reason", "path", "cell"} for r in regions)
    assert regions[0]["reason"] == "contains step loop at cell 4 (id train), line 6"


def test_loops_table_has_a_cell_column(work):
    result = invoke("loops", "nb.ipynb")
    assert result.exit_code == 0
    assert "cell" in result.stdout and "4 (train)" in result.stdout


# -- instrument, strip -----------------------------------------------------------------------------------------------

def test_instrument_writes_a_valid_notebook_with_the_same_cells(work):
    result = invoke("instrument", "nb.ipynb")
    assert result.exit_code == 0, result.stderr
    original = nbformat.read("nb.ipynb", as_version=4)
    copy = nbformat.read("nb_itt.ipynb", as_version=4)
    nbformat.validate(copy)
    assert [(c.cell_type, c.get("id"), c.metadata, c.get("outputs")) for c in copy.cells] == \
           [(c.cell_type, c.get("id"), c.metadata, c.get("outputs")) for c in original.cells]
    assert copy.metadata == original.metadata and copy.cells[0].source == original.cells[0].source


def test_the_copy_has_the_markers_inside_the_training_cell_and_keeps_its_ipython_syntax(work):
    invoke("instrument", "nb.ipynb")
    setup, data, train, evaluate = code_sources(work / "nb_itt.ipynb")
    assert 'itt.task_begin(_autoitt_domain, "step")' in train
    assert 'itt.task_begin(_autoitt_domain, "eval")' in evaluate
    assert "!echo preparing" in setup and data.startswith("%time features = torch.randn(32, 8)")


def test_the_header_goes_in_the_first_code_cell(work):
    invoke("instrument", "nb.ipynb")
    setup = code_sources(work / "nb_itt.ipynb")[0]
    assert setup.startswith("import ittapi.compat as itt\n") and "# autoitt: instrumented copy of nb.ipynb" in setup


def test_strip_gives_back_the_original_notebook_byte_for_byte(work):
    invoke("instrument", "nb.ipynb")
    result = invoke("strip", "nb_itt.ipynb", "-o", "back.ipynb")
    assert result.exit_code == 0, result.stderr
    assert (work / "back.ipynb").read_bytes() == (work / "nb.ipynb").read_bytes()


def test_instrumenting_the_copy_again_changes_nothing(work):
    invoke("instrument", "nb.ipynb")
    result = invoke("instrument", "nb_itt.ipynb", "--check")
    assert result.exit_code == 0 and "already instrumented" in result.stderr


def test_diff_shows_the_changes_cell_by_cell_and_writes_nothing(work):
    before = snapshot(work)
    result = invoke("instrument", "nb.ipynb", "--diff", "--no-color")
    assert result.exit_code == 0
    assert "--- nb.ipynb cell 4 (id train)\n+++ nb_itt.ipynb cell 4 (id train)\n" in result.stdout
    assert "--- nb.ipynb cell 5 (id evaluate)" in result.stdout and "cell 3 (id data)" not in result.stdout
    assert '+            itt.task_begin(_autoitt_domain, "epoch")\n' in result.stdout
    assert snapshot(work) == before


def test_check_exits_1_and_names_the_regions_by_cell(work):
    before = snapshot(work)
    result = invoke("instrument", "nb.ipynb", "--check")
    assert result.exit_code == 1
    assert "step at cell 4 (id train), line 6" in result.stderr
    assert snapshot(work) == before


def test_a_magic_inside_a_loop_is_put_back_at_its_new_indentation(work):
    write_notebook(work / "m.ipynb", new_code_cell(textwrap.dedent("""\
        import torch
        model = torch.nn.Linear(2, 1)
        for step in range(2):
            %time loss = model(torch.ones(2)).sum()
            loss.backward()""")))
    assert invoke("instrument", "m.ipynb").exit_code == 0
    [cell] = code_sources(work / "m_itt.ipynb")
    assert "\n                %time loss = model(torch.ones(2)).sum()\n" in cell  # inside try: and the step's try:
    invoke("strip", "m_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "m.ipynb").read_bytes()


#: Jupyter keeps a loop body's indentation on its blank lines; IPython runs them emptied
WHITESPACE_LINES = "import torch\nmodel = torch.nn.Linear(2, 1)\nfor step in range(2):\n    \n" \
                   "    loss = model(torch.ones(2)).sum()\n        \n    loss.backward()\n"


@pytest.mark.parametrize("ipython", [True, False], ids=["ipython", "without-ipython"])
def test_a_line_of_only_whitespace_inside_a_loop_keeps_its_markers_and_strips_back(work, monkeypatch, ipython):
    if not ipython:
        monkeypatch.setattr(ipython_syntax, "_transformer", lambda: None)
    write_notebook(work / "w.ipynb", new_code_cell(WHITESPACE_LINES, id="train"))
    assert [(r["role"], r["line"]) for r in loops_json("w.ipynb")] == [("step", 3)]
    assert invoke("instrument", "w.ipynb").exit_code == 0
    assert 'itt.task_begin(_autoitt_domain, "step")' in code_sources(work / "w_itt.ipynb")[0]
    invoke("strip", "w_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "w.ipynb").read_bytes()


def test_a_cell_opening_with_blank_lines_keeps_its_markers_at_its_own_lines(work):
    # IPython drops a cell's leading blank lines before it runs it
    write_notebook(work / "b.ipynb", new_code_cell("\n  \n" + WHITESPACE_LINES, id="train"))
    assert [(r["role"], r["line"]) for r in loops_json("b.ipynb")] == [("step", 5)]
    assert invoke("instrument", "b.ipynb").exit_code == 0
    invoke("strip", "b_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "b.ipynb").read_bytes()


def test_a_time_cell_magic_after_blank_lines_is_still_read_as_its_body(work):
    write_notebook(work / "t.ipynb", new_code_cell("\n" + TIMED_TRAINING, id="timed"))
    result = invoke("instrument", "t.ipynb")
    assert result.exit_code == 0, result.stderr
    assert "cell 1 (id timed), line 2: %%time cell: its body is read as Python" in result.stderr


def test_a_cell_magic_cell_runs_as_ipython_runs_it_without_markers_and_with_a_note(work):
    write_notebook(work / "c.ipynb", new_code_cell("import torch\nmodel = torch.nn.Linear(2, 1)"),
                   new_code_cell("%%timeit -n 1 -r 1\nfor step in range(2):\n    model(torch.ones(2)).sum().backward()",
                                 id="timed"))
    result = invoke("loops", "c.ipynb")
    assert "no training loops found" in result.stdout
    assert "c.ipynb, cell 2 (id timed): its %%timeit cell magic makes it one statement for Python" in said(result)


def test_a_time_cell_magic_keeps_its_loop_markable_and_stays_the_first_line_of_its_cell(work):
    write_notebook(work / "t.ipynb", new_code_cell(TIMED_TRAINING, id="timed"))
    assert loops_json("t.ipynb")[0]["cell"] == {"index": 1, "id": "timed"}
    result = invoke("instrument", "t.ipynb")
    assert result.exit_code == 0, result.stderr
    assert "cell 1 (id timed), line 1: %%time cell: its body is read as Python" in result.stderr
    header, timed = nbformat.read("t_itt.ipynb", as_version=4).cells
    # The header cannot go above the cell magic (IPython reads %%time only as a cell's first line).
    assert header.get("id") == "autoitt-header" and header.source.startswith("import ittapi.compat as itt")
    assert timed.source.startswith("%%time\nimport torch\n") and 'itt.task_begin(_autoitt_domain, "step")' in timed.source
    invoke("strip", "t_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "t.ipynb").read_bytes()


def test_a_first_cell_of_imports_only_takes_the_header_at_its_end(work):
    write_notebook(work / "i.ipynb", new_code_cell("import torch", id="imports"),
                   new_code_cell(TIMED_TRAINING.replace("%%time\nimport torch\n", ""), id="train"))
    assert invoke("instrument", "i.ipynb").exit_code == 0
    imports, train = code_sources(work / "i_itt.ipynb")
    assert imports.startswith("import torch\nimport ittapi.compat as itt\n") and "_autoitt_domain = " in imports
    assert train.startswith("model = torch.nn.Linear(2, 1)\n")
    invoke("strip", "i_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "i.ipynb").read_bytes()


def test_a_cell_with_top_level_await_runs_in_an_event_loop_without_markers_and_with_a_note(work):
    write_notebook(work / "a.ipynb", new_code_cell("import asyncio"),
                   new_code_cell("await asyncio.sleep(0)\n" + TIMED_TRAINING.replace("%%time\n", ""), id="async"))
    result = invoke("instrument", "a.ipynb")
    assert result.exit_code == 0, result.stderr
    assert "cell 2 (id async): its top-level await makes it a coroutine for Python" in " ".join(result.stderr.split())
    assert "no training loops found; nothing written" in result.stderr


def test_a_notebook_opening_with_a_cell_magic_gets_a_header_cell_that_strip_removes(work):
    write_notebook(work / "h.ipynb", new_code_cell("%%capture\n!echo quiet"),
                   new_code_cell("import torch\nmodel = torch.nn.Linear(2, 1)\nfor step in range(2):\n"
                                 "    model(torch.ones(2)).sum().backward()"))
    assert invoke("instrument", "h.ipynb").exit_code == 0
    cells = nbformat.read("h_itt.ipynb", as_version=4).cells
    assert [c.get("id") for c in cells][0] == "autoitt-header" and len(cells) == 3
    assert cells[0].source.startswith("import ittapi.compat as itt") and cells[1].source == "%%capture\n!echo quiet"
    invoke("strip", "h_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "h.ipynb").read_bytes()


def test_a_cell_python_compiles_only_inside_a_function_is_left_out_with_a_note(work):
    write_notebook(work / "r.ipynb", new_code_cell("x = 1\nreturn x", id="early"))
    result = invoke("loops", "r.ipynb")
    assert "r.ipynb, cell 1 (id early), line 2: syntax error: 'return' outside function" in said(result)


def test_a_cell_that_is_not_python_is_left_out_with_a_note(work):
    write_notebook(work / "s.ipynb", new_code_cell("def broken(:\n    pass", id="scratch"), new_code_cell("x = 1"))
    result = invoke("loops", "s.ipynb")
    assert result.exit_code == 0
    assert "s.ipynb, cell 1 (id scratch), line 1: syntax error: invalid syntax: left out of detection" in said(result)


# -- without IPython -------------------------------------------------------------------------------------------------

def test_without_ipython_magics_are_no_ops_with_a_note_and_loops_are_still_found(work, without_ipython):
    result = invoke("loops", "--json", "nb.ipynb")
    assert [r["role"] for r in json.loads(result.stdout)] == ["epoch", "step", "eval"]
    result = invoke("loops", "nb.ipynb")
    assert "cell 2 (id setup), line 1: '!echo preparing' runs as a no-op without IPython" in said(result)


def test_without_ipython_the_copy_keeps_its_magics_and_strips_back(work, without_ipython):
    assert invoke("instrument", "nb.ipynb").exit_code == 0
    assert code_sources(work / "nb_itt.ipynb")[1].startswith("%time features")
    invoke("strip", "nb_itt.ipynb", "-o", "back.ipynb")
    assert (work / "back.ipynb").read_bytes() == (work / "nb.ipynb").read_bytes()


# -- broken notebooks ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, reason", [
    ('{"cells": [', "not a Jupyter notebook: invalid JSON"),
    ('{"cells": [{"cell_type": "code", "source": "x = 1"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 4}',
     "not a valid notebook (nbformat validation)"),
    ('{"cells": [], "metadata": {}}', "no 'nbformat' version"),
    ('{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": []}', "nbformat 3 notebook"),
])
@pytest.mark.parametrize("command", [["loops"], ["instrument"], ["instrument", "--diff"], ["strip"],
                                     ["profile", "--backend", "builtin"]])
def test_a_broken_notebook_exits_2_with_its_reason_and_writes_nothing(work, content, reason, command):
    (work / "bad.ipynb").write_text(content)
    before = snapshot(work)
    result = invoke(*command, "bad.ipynb")
    assert result.exit_code == 2
    assert "bad.ipynb" in result.stderr and reason in result.stderr
    assert snapshot(work) == before


# -- profile ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def notebook_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebook")
    shutil.copy(NOTEBOOK, folder / "nb.ipynb")
    done = autoitt("profile", "--backend", "builtin", "--json", "-r", str(folder / "result"), "nb.ipynb", cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "result", json.loads(done.stdout), done


@pytest.mark.slow
def test_profile_records_the_eight_steps_of_the_training_cell(notebook_run):
    _, summary, done = notebook_run
    assert summary["steps"][0]["label"] == "step" and summary["steps"][0]["count"] == 8
    assert "epoch 1: loss" in done.stderr and "eval loss" in done.stderr  # the cells' own output


@pytest.mark.slow
def test_profile_runs_the_shell_escape_and_the_line_magic_with_ipython(notebook_run):
    _, _, done = notebook_run
    assert "preparing" in done.stderr and "Wall time" in done.stderr


@pytest.mark.slow
def test_profile_keeps_the_program_the_instrumented_notebook_and_regions_by_cell(notebook_run):
    folder, _, _ = notebook_run
    assert {"nb_itt.py", "nb_cells.py", "nb_itt.ipynb", "instrument.diff"} <= {p.name for p in folder.iterdir()}
    step = next(r for r in json.loads((folder / "loops.json").read_text()) if r["role"] == "step")
    assert step["cell"] == {"index": 4, "id": "train"} and step["line"] == 6
    assert "nb.ipynb cell 4 (id train)" in (folder / "instrument.diff").read_text()


@pytest.mark.slow
def test_profile_runs_in_the_notebooks_folder_and_tracebacks_show_the_program(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.txt").write_text("42")
    write_notebook(tmp_path / "sub" / "fail.ipynb", new_markdown_cell("relative paths"),
                   new_code_cell("print('read', open('data.txt').read())\n1 / 0"))
    done = autoitt("profile", "--backend", "builtin", "-r", str(tmp_path / "result"), "sub/fail.ipynb", cwd=tmp_path)
    assert done.returncode == 1
    assert "read 42" in done.stdout
    assert 'fail_cells.py", line 2' in done.stderr and "    1 / 0" in done.stderr


@pytest.mark.slow
def test_profile_runs_a_notebook_whose_first_cell_opens_with_a_docstring_and_a_future_import(tmp_path):
    (tmp_path / "data.txt").write_text("42")
    write_notebook(tmp_path / "nb.ipynb",
                   new_code_cell('"""Jupyter allows them first."""\nfrom __future__ import annotations\nimport torch'),
                   new_code_cell(TIMED_TRAINING.split("\n", 1)[1]),
                   new_code_cell("print('read', open('data.txt').read())"))
    done = autoitt("profile", "--backend", "builtin", "-r", str(tmp_path / "result"), "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "read 42" in done.stdout  # the prelude still runs: the notebook's folder is the working directory
    assert json.loads((tmp_path / "result" / "summary.json").read_text())["steps"][0]["count"] == 3


@pytest.mark.slow
def test_profile_without_ipython_runs_magics_as_no_ops_with_a_note(tmp_path):
    # An IPython package that cannot be imported, first on the path: as where IPython is not installed.
    (tmp_path / "stub" / "IPython").mkdir(parents=True)
    (tmp_path / "stub" / "IPython" / "__init__.py").write_text("raise ImportError('IPython is not installed')\n")
    shutil.copy(NOTEBOOK, tmp_path / "nb.ipynb")
    path = os.pathsep.join([str(tmp_path / "stub"), os.environ.get("PYTHONPATH", "")])
    done = autoitt("profile", "--backend", "builtin", "-r", str(tmp_path / "result"), "nb.ipynb",
                   cwd=tmp_path, env={"PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "result" / "summary.json").read_text())["steps"][0]["count"] == 8
    assert "'!echo preparing' runs as a no-op without IPython" in done.stderr
    assert "'%time features = torch.randn(32, 8)' runs untimed without IPython" in done.stderr
    assert "preparing" not in done.stdout and "Wall time" not in done.stdout


@pytest.mark.slow
def test_vtune_rows_on_the_program_are_shown_at_their_cell_and_line(notebook_run):
    folder, _, _ = notebook_run
    instrumentation = Instrumentation.load(folder)
    to_original = source_mapper(instrumentation, [])
    program = instrumentation.entry.program
    step_line = Path(program).read_text().splitlines().index("        loss.backward()") + 1
    row = to_original(FunctionRow("<module>", 1.0, "python3", "<module>", program, step_line, {}))
    assert (row.source_file, row.source_line) == ("nb.ipynb cell 4", 9)


#: The same shapes in pure Python and numpy: what the version matrix profiles (no torch on 3.13 and 3.14).
TIMED_NUMPY_STEPS = textwrap.dedent("""\
    %%time
    import numpy as np
    w = np.zeros(4)
    for step in range(3):  # autoitt: step
        w -= 0.1 * (w - np.ones(4))""")


@pytest.mark.slow
@pytest.mark.parametrize("training", [TIMED_TRAINING, TIMED_NUMPY_STEPS], ids=["torch", "numpy"])
def test_profile_marks_a_time_cell_and_runs_an_await_cell(tmp_path, training):
    write_notebook(tmp_path / "mixed.ipynb", new_code_cell("import asyncio"),
                   new_code_cell("await asyncio.sleep(0)\nprint('awaited')"), new_code_cell(training))
    done = autoitt("profile", "--backend", "builtin", "-r", str(tmp_path / "result"), "mixed.ipynb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "awaited" in done.stdout
    assert json.loads((tmp_path / "result" / "summary.json").read_text())["steps"][0]["count"] == 3
