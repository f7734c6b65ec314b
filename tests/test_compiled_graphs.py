"""torch.compile's graphs as operator rows named by the function compiled (issue 39).

The runtime tells the trace each compile's function (:mod:`instrumenter.runtime.compiled`, tested with a
stand-in for Dynamo's metrics); the reader pairs graphs with their functions
(:mod:`instrumenter.builtin.statistics.compiled`, tested on task instances as PyTorch nests them); and a real
``torch.compile`` loop, profiled as a user profiles it, shows its graphs as rows with exact counts.
"""

from __future__ import annotations

import json
import sys
import textwrap
import types
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest

from instrumenter.builtin.statistics.compiled import graph_labels
from instrumenter.builtin.statistics.intervals import Intervals
from instrumenter.runtime import compiled
from tests.test_profile import autoitt

REAL = Path(__file__).parent / "inputs" / "real"


# -- the runtime: each compile told once ---------------------------------------------------------------------

def _metrics(*entries):
    return deque(SimpleNamespace(compile_id=c, co_name=n, co_filename=f, co_firstlineno=l) for c, n, f, l in entries)


@pytest.fixture
def told(monkeypatch):
    """The string handles :func:`compiled.tell` makes, with a stand-in for ``torch._dynamo.utils``."""
    made = []
    utils = types.ModuleType("torch._dynamo.utils")
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)
    monkeypatch.setattr(compiled, "_handle", made.append)
    monkeypatch.setattr(compiled, "_told", set())
    monkeypatch.setattr(compiled, "_last", None)
    return utils, made


def test_each_compile_is_told_once_and_reads_back_as_it_was(told):
    utils, made = told
    utils._compilation_metrics = _metrics(("0/0", "forward", "/w/train.py", 21))
    compiled.tell()
    compiled.tell()
    utils._compilation_metrics.append(_metrics(("0/1", "forward", "/w/train.py", 21))[0])
    compiled.tell()
    assert [compiled.parse(text) for text in made] == [("0/0", "forward", "/w/train.py", 21),
                                                      ("0/1", "forward", "/w/train.py", 21)]


def test_a_process_that_never_imported_dynamo_tells_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    made = []
    monkeypatch.setattr(compiled, "_handle", made.append)
    compiled.tell()
    assert made == []


def test_metrics_of_another_shape_are_never_the_programs_error(told):
    utils, made = told
    utils._compilation_metrics = deque([SimpleNamespace(), SimpleNamespace(compile_id="0/0", co_filename="/f.py",
                                                                           co_firstlineno="not a line")])
    compiled.tell()
    utils._compilation_metrics = "a string"
    compiled.tell()
    assert made == []


def test_a_string_handle_that_is_not_a_compiles_parses_as_none():
    assert compiled.parse("aten::mm") is None
    assert compiled.parse(compiled.PREFIX + "[1, 2") is None


# -- the reader: graphs paired with their functions ----------------------------------------------------------

GROUPS = [("PyTorch", "Torch-Compiled Region: 0/0"), ("PyTorch", "CompiledFunction"),
          ("PyTorch", "## Call CompiledFxGraph fwdA ##"), ("PyTorch", "CompiledFunctionBackward"),
          ("PyTorch", "## Call CompiledFxGraph bwdA ##"), ("PyTorch", "Torch-Compiled Region: 1/0"),
          ("PyTorch", "## Call CompiledFxGraph fwdB ##"), ("PyTorch", "## Call CompiledFxGraph bwdB ##"),
          ("PyTorch", "Torch-Compiled Region: 0/1"), ("PyTorch", "## Call CompiledFxGraph inferA ##")]
G = {name.split()[-2] if name.startswith("##") else name: i for i, (_, name) in enumerate(GROUPS)}


def _instances(spans):
    """(group, start, end) on one thread of process 7."""
    return Intervals.of(7, 1, [G[g] for g, _, _ in spans], [s for _, s, _ in spans], [e for _, _, e in spans],
                        [True] * len(spans))


def _step(t):
    """Two compiled functions run, a then b, then their backwards (b's first), as the autograd engine runs them."""
    return [("Torch-Compiled Region: 0/0", t, t + 10), ("CompiledFunction", t + 1, t + 9), ("fwdA", t + 2, t + 8),
            ("Torch-Compiled Region: 1/0", t + 11, t + 20), ("CompiledFunction", t + 12, t + 19),
            ("fwdB", t + 13, t + 18),
            ("CompiledFunctionBackward", t + 21, t + 30), ("bwdB", t + 22, t + 29),
            ("CompiledFunctionBackward", t + 31, t + 40), ("bwdA", t + 32, t + 39)]


def _evaluation(t):
    """The first function run with gradients off: its inference graph, in a region of its own, no autograd node."""
    return [("Torch-Compiled Region: 0/1", t, t + 10), ("inferA", t + 1, t + 9)]


def _trace(*told):
    return SimpleNamespace(pid=7, strings={i: compiled.text(*t) for i, t in enumerate(told)})


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent("""\
        import torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return x

        @torch.no_grad()
        def head(x):
            return x
    """))
    return str(path)


def _labels(spans, *told):
    return graph_labels([_trace(*told)], _instances(spans), GROUPS, lambda path: Path(path).name)


def test_a_forward_graph_is_named_by_the_function_its_region_compiled(source):
    labels = _labels(_step(0), ("0/0", "forward", source, 3), ("1/0", "head", source, 6))
    assert labels["## Call CompiledFxGraph fwdA ##"] == "compiled Net.forward (train.py:3)"
    assert labels["## Call CompiledFxGraph fwdB ##"] == "compiled head (train.py:6)"


def test_a_backward_graph_is_paired_with_the_latest_forward_graph_not_yet_paired(source):
    labels = _labels(_step(0) + _step(100), ("0/0", "forward", source, 3), ("1/0", "head", source, 6))
    assert labels["## Call CompiledFxGraph bwdB ##"] == "compiled head (train.py:6), backward"
    assert labels["## Call CompiledFxGraph bwdA ##"] == "compiled Net.forward (train.py:3), backward"


def test_an_inference_graph_is_never_paired_with_a_backward(source):
    """An evaluation between steps runs a graph with no autograd node: the next backward is not its."""
    spans = _step(0) + _evaluation(50) + [(g, s + 100, e + 100) for g, s, e in _step(0)]
    labels = _labels(spans, ("0/0", "forward", source, 3), ("1/0", "head", source, 6), ("0/1", "forward", source, 3))
    assert labels["## Call CompiledFxGraph bwdA ##"] == "compiled Net.forward (train.py:3) [0/0], backward"
    assert labels["## Call CompiledFxGraph inferA ##"] == "compiled Net.forward (train.py:3) [0/1]"


def test_a_region_whose_function_was_never_told_is_named_by_its_compile_id():
    labels = _labels(_step(0))
    assert labels["## Call CompiledFxGraph fwdA ##"] == "compiled region 0/0"
    assert labels["## Call CompiledFxGraph bwdA ##"] == "compiled region 0/0, backward"


def test_a_function_whose_source_is_gone_keeps_its_code_name(tmp_path):
    labels = _labels(_step(0), ("0/0", "forward", str(tmp_path / "gone.py"), 3))
    assert labels["## Call CompiledFxGraph fwdA ##"] == "compiled forward (gone.py:3)"


# -- a real torch.compile loop -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compile_run(tmp_path_factory):
    pytest.importorskip("torch")
    work = tmp_path_factory.mktemp("compiled")
    (work / "compile_loop.py").write_text((REAL / "compile_loop.py").read_text())
    done = autoitt("profile", "--json", "-r", "out", "compile_loop.py", cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    text = autoitt("report", "out", cwd=work, env={"COLUMNS": "120"})
    assert text.returncode == 0, text.stderr[-3000:]
    return json.loads(done.stdout), text.stdout


def test_a_compiled_loops_graphs_are_rows_counted_exactly_and_named_by_their_function(compile_run):
    summary, _ = compile_run
    rows = {op["label"]: op for op in summary["operators"] if op["label"]}
    function = "compiled Classifier.forward (compile_loop.py:32)"
    # 3 epochs of 50 steps, each with its forward and backward graph; 3 evaluations of 4 batches: the
    # no-grad forward is a second compile of the same function
    assert {label: op["count"] for label, op in rows.items()} == {
        f"{function} [0/0]": 150, f"{function} [0/0], backward": 150, f"{function} [0/1]": 12}
    assert all(op["name"].startswith("## Call CompiledFxGraph ") and op["self_with_library_s"] > 0
               for op in rows.values())


def test_the_operator_table_shows_a_compiled_graph_by_its_function_not_its_hash(compile_run):
    _, text = compile_run
    table = text[text.index("Top PyTorch operators"):]
    assert "compiled Classifier.forward (compile_loop.py:32) [0/0]" in table
    assert "CompiledFxGraph" not in text
