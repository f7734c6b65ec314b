"""``autoitt profile`` end to end with the built-in collector: real torch, real TensorFlow, real ittapi.

Each test runs the real command in a subprocess (so the collector is loaded by
ITT through INTEL_LIBITTNOTIFY64, as for a user) and checks what it recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from instrumenter.builtin.statistics.aggregate import aggregate
from instrumenter.builtin.statistics.intervals import Keep
from instrumenter.builtin.trace.events import read_trace_dir
from instrumenter.builtin.trace.scan import scan_trace_dir
from instrumenter.runtime.torch_ops import OperatorSampling
from tests.conftest import SAMPLES

pytestmark = pytest.mark.slow


def autoitt(*args, cwd=None, env=None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "instrumenter", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=600)


def task_count(summary, domain, name):
    return sum(t["count"] for t in summary["tasks"] if t["domain"] == domain and t["name"] == name)


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torch") / "result"
    done = autoitt("profile", "--json", "-r", str(folder), str(SAMPLES / "torch_train.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(done.stdout), done


def test_pytorch_step_tasks_match_the_batches_run(torch_run):
    folder, summary, _ = torch_run
    batches_run = 2 * (64 // 8)  # EPOCHS * TRAIN_SAMPLES / BATCH_SIZE in samples/torch_train.py
    assert task_count(summary, "autoitt.torch_train", "step") == batches_run
    assert task_count(summary, "autoitt.torch_train", "epoch") == 2
    assert summary["steps"][0]["label"] == "step" and summary["steps"][0]["count"] == batches_run


def test_pytorch_operators_are_recorded_nested_inside_step_tasks(torch_run):
    folder, summary, _ = torch_run
    operators = {t["name"] for t in summary["tasks"] if t["domain"] == "PyTorch"}
    assert {"aten::conv2d", "aten::batch_norm", "aten::relu"} <= operators
    found = aggregate(scan_trace_dir(folder / "itt")[0], ["autoitt.torch_train"], Keep())
    kept = found.kept
    names = [found.groups[g] for g in kept.group.tolist()]
    items = list(zip(names, kept.tid.tolist(), kept.start.tolist(), kept.end.tolist()))
    steps = [i for i in items if i[0] == ("autoitt.torch_train", "step")]
    convs = [i for i in items if i[0][1] == "aten::conv2d"]
    inside = [c for c in convs if any(s[1] == c[1] and s[2] <= c[2] and c[3] <= s[3] for s in steps)]
    # the forward conv of every training batch that recorded its operators (--torch-ops sampled, the default:
    # steps 1-11 of the 16) runs inside its step; eval convs run inside eval tasks
    assert len(steps) == 16 and len(inside) == OperatorSampling().count(16) == 11


def test_result_folder_keeps_copy_diff_loops_and_outputs(torch_run):
    folder, _, _ = torch_run
    names = {p.name for p in folder.iterdir()}
    # torch_train.autoitt.pyc: the copy compiled as the script, which the run executed (python PYC ARGS)
    assert {"torch_train_itt.py", "torch_train.autoitt.pyc", "instrument.diff", "loops.json", "run.json",
            "trace.json", "summary.json", "steps.svg", "itt"} <= names
    assert [r["role"] for r in json.loads((folder / "loops.json").read_text())] == ["epoch", "step", "eval"]
    assert "+" in (folder / "instrument.diff").read_text()


def test_trace_json_has_named_threads_processes_and_complete_events(torch_run):
    folder, _, _ = torch_run
    trace = json.loads((folder / "trace.json").read_text())["traceEvents"]
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in trace)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in trace)
    complete = [e for e in trace if e["ph"] == "X"]
    assert {"autoitt.torch_train", "PyTorch"} <= {e["cat"] for e in complete}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)


def test_step_picture_is_an_svg_with_one_point_per_step(torch_run):
    folder, summary, _ = torch_run
    root = ElementTree.parse(folder / "steps.svg").getroot()
    polyline = root.find("{http://www.w3.org/2000/svg}polyline")
    assert len(polyline.get("points").split()) == summary["steps"][0]["count"]


def test_report_prints_the_same_summary_again(torch_run):
    folder, summary, _ = torch_run
    again = autoitt("report", "--json", str(folder))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == summary
    human = autoitt("report", str(folder))
    assert "Step time (step, 16 steps)" in human.stdout
    assert "Phases of `step`" in human.stdout


def test_the_one_screen_shows_each_evaluation_with_its_runs_and_share(torch_run):
    folder, summary, _ = torch_run
    (eval_loop,) = [t for t in summary["tasks"] if t["domain"] == "autoitt.torch_train" and t["name"] == "eval_loop"]
    short = " ".join(autoitt("report", str(folder)).stdout.split())
    assert f"Evaluation (`eval_loop`, {eval_loop['count']} runs): " in short
    assert "of the collected time" in short


def test_the_summary_fits_one_screen_and_verbose_adds_every_task_table(torch_run):
    folder, _, _ = torch_run
    short = autoitt("report", str(folder)).stdout
    assert "Top tasks" not in short and "Top PyTorch operators" in short
    # At 120 columns: header, iteration and step time, phases, evaluations, operators, hotspots and profiling's
    # cost, six lines of your code, notes: about 72 lines. Sampled function names differ run to run and a long
    # one folds onto a second line (up to 12 hotspot rows), and a machine busy with other work adds its note, so
    # the bound leaves room for that; printing any task table would add 20 lines or more. Where the step's thread
    # blocked (the DataLoader's queue), the waiting column's note and the phases' waiting line add up to 5.
    assert len(short.splitlines()) <= 90
    full = autoitt("report", "--verbose", str(folder)).stdout
    for table in ("Top tasks, domain autoitt.torch_train", "Top tasks, domain PyTorch",
                  "Top tasks, domain dnnl::primitive::execute"):
        assert table in full


def test_the_scripts_own_output_goes_to_stderr_with_json(torch_run):
    _, _, done = torch_run
    assert "Training completed." in done.stderr


def test_tf1_session_records_onednn_convolutions_and_steps(tmp_path):
    folder = tmp_path / "tf1"
    # oneDNN (and so its ITT tasks) is only on by default in TF on Intel CPUs
    done = autoitt("profile", "--json", "-r", str(folder), str(SAMPLES / "tf1_session.py"),
                   env={"TF_ENABLE_ONEDNN_OPTS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert task_count(summary, "autoitt.tf1_session", "step") == 5 * 10
    assert task_count(summary, "dnnl::primitive::execute", "convolution") >= 5 * 10


SCRIPT_WITH_OUTSIDE_RANGES = textwrap.dedent(
    """
    import sys
    import torch

    torch.manual_seed(0)
    torch.profiler.itt.range_push("setup")
    model = torch.nn.Linear(4, 1)
    torch.profiler.itt.range_pop()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.ones(4)).sum()
        loss.backward()
        optimizer.step()
        if len(sys.argv) > 1 and sys.argv[1] == "raise" and step == 1:
            raise RuntimeError("diverged")
    torch.profiler.itt.range_push("teardown")
    torch.profiler.itt.range_pop()
    print("done")
    """
)


def test_tasks_outside_resume_and_pause_are_not_collected(tmp_path):
    script = tmp_path / "ranges.py"
    script.write_text(SCRIPT_WITH_OUTSIDE_RANGES)
    done = autoitt("profile", "--json", "-r", str(tmp_path / "out"), str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    names = {t["name"] for t in json.loads(done.stdout)["tasks"]}
    assert "step" in names and "training" in names
    assert "setup" not in names and "teardown" not in names


def test_a_failing_script_keeps_its_trace_and_exit_code(tmp_path):
    script = tmp_path / "ranges.py"
    script.write_text(SCRIPT_WITH_OUTSIDE_RANGES)
    done = autoitt("profile", "-r", str(tmp_path / "out"), str(script), "raise", cwd=tmp_path)
    assert done.returncode == 1
    assert "RuntimeError: diverged" in done.stderr
    assert "exited with code 1" in done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert task_count(summary, "autoitt.ranges", "step") == 2  # the raising step ends via finally


def test_the_copy_sees_the_originals_file_argv_and_path(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    (tmp_path / "data.txt").write_text("1\n")
    script = tmp_path / "where.py"
    script.write_text(textwrap.dedent(
        """
        import os, sys
        import helper
        print("file", __file__)
        print("argv", sys.argv)
        print("path0", sys.path[0])
        print("data", open(os.path.join(os.path.dirname(__file__), "data.txt")).read().strip())
        for step in range(2):
            loss = helper.VALUE
            loss.backward() if hasattr(loss, "backward") else None
        sys.exit(3)
        """
    ))
    elsewhere = tmp_path / "run-from-here"
    elsewhere.mkdir()
    done = autoitt("profile", "-r", str(tmp_path / "out"), "../where.py", "--flag", cwd=elsewhere)
    assert done.returncode == 3
    # __file__ as Python makes it for `python ../where.py`: the working directory joined to the path as typed, not
    # normalized (the launcher used to normalize it: os.path.abspath)
    assert f"file {elsewhere / '..' / 'where.py'}" in done.stdout
    plain = subprocess.run([sys.executable, "../where.py", "--flag"], cwd=elsewhere, capture_output=True, text=True)
    assert plain.stdout in done.stdout
    assert "argv ['../where.py', '--flag']" in done.stdout
    assert f"path0 {tmp_path}" in done.stdout
    assert "data 1" in done.stdout


WORKERS = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    def main():
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        loader = DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context=CONTEXT)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print("done")

    if __name__ == "__main__":
        main()
    """
)


def test_dataloader_workers_started_the_default_way_are_sampled_in_their_own_processes(tmp_path):
    """The default start method: fork up to 3.13, forkserver from 3.14. A forkserver's workers inherit no profiler
    state (they make no ITT call, so they write no trace file), but their CPU time is sampled, each in its own file."""
    script = tmp_path / "workers.py"
    script.write_text(WORKERS.replace("CONTEXT", "None"))
    folder = tmp_path / "out"
    done = autoitt("profile", "--json", "-r", str(folder), str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert task_count(summary, "autoitt.workers", "step") == 8
    assert summary["sampling"]["processes"] >= 3  # the script and its two workers (and a forkserver, on 3.14)
    assert len(list((folder / "itt").glob("samples-*.bin"))) == summary["sampling"]["processes"]


def test_dataloader_workers_write_their_own_files(tmp_path):
    """Forked workers (the default up to 3.13) inherit PyTorch's profiler and record their operators (the batches'
    collation) as tasks, each in a trace file of its own."""
    script = tmp_path / "workers.py"
    script.write_text(WORKERS.replace("CONTEXT", '"fork"'))
    folder = tmp_path / "out"
    # every operator: the workers' own (the batches' collation) are then tasks in their own files; sampled, the
    # default, records operators inside the steps the rule picks, which run in the main process
    done = autoitt("profile", "--json", "--torch-ops", "all", "-r", str(folder), str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    traces = read_trace_dir(folder / "itt").traces
    assert len(traces) >= 3  # the script and its two workers
    assert all(not t.warnings for t in traces)
    main = [t for t in traces if t.ppid not in {u.pid for u in traces}]
    assert len(main) == 1
    summary = json.loads(done.stdout)
    assert task_count(summary, "autoitt.workers", "step") == 8
    workers = [e for e in json.loads((folder / "trace.json").read_text())["traceEvents"]
               if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("worker process")]
    assert len(workers) == len(traces) - 1


def test_a_damaged_trace_file_is_read_up_to_the_damage(torch_run, tmp_path):
    folder, _, _ = torch_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    trace_file = next((copy / "itt").glob("itt-*.bin"))
    data = trace_file.read_bytes()
    trace_file.write_bytes(data[: len(data) * 2 // 3])
    done = autoitt("report", "--json", str(copy))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert any("truncated" in w or "damage" in w for w in summary["warnings"])
    assert summary["events"] > 0


def test_a_run_without_itt_events_says_so(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('no training here')\n")
    done = autoitt("profile", "-r", str(tmp_path / "out"), str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no training loops found" in done.stderr
    assert "No ITT tasks were recorded" in done.stdout


def test_result_folder_is_never_reused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    script = tmp_path / "plain.py"
    script.write_text("print('x')\n")
    done = autoitt("profile", "-r", str(tmp_path / "out"), str(script), cwd=tmp_path)
    assert done.returncode == 2
    assert "not empty" in done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["keep.txt"]


def test_default_result_folders_count_up(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('x')\n")
    for _ in range(2):
        assert autoitt("profile", str(script), cwd=tmp_path).returncode == 0
    assert sorted(p.name for p in (tmp_path / "autoitt-results").iterdir()) == ["plain-1", "plain-2"]


def test_auto_backend_says_which_backend_and_why(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('x')\n")
    done = autoitt("profile", str(script), cwd=tmp_path, env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"})
    assert "backend: built-in ITT collector (no vtune on PATH" in done.stderr


@pytest.mark.parametrize("content", [b"", b"AITTRACE\x01", b"not a trace at all, but long enough to be a header of one\n"],
                         ids=["empty", "cut-in-header", "foreign"])
def test_a_trace_file_that_cannot_be_read_is_named_and_skipped(torch_run, tmp_path, content):
    folder, summary, _ = torch_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    (copy / "itt" / "itt-999999.bin").write_bytes(content)
    done = autoitt("report", "--json", str(copy))
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert any(w.startswith("itt-999999.bin: ") and w.endswith("skipped") for w in again["warnings"])
    assert again["steps"] == summary["steps"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
def test_another_user_can_report_a_result_folder(torch_run, tmp_path_factory):
    """Result files get the mode a plain write would give (umask 022: readable by all), and
    ``autoitt report`` by a user who cannot write the folder still summarizes it."""
    folder, summary, _ = torch_run
    shared = Path(tempfile.mkdtemp(prefix="autoitt-shared-")) / "result"
    try:
        shutil.copytree(folder, shared)  # out of pytest's root-only tmp folder, modes kept
        os.chmod(shared.parent, 0o755)
        assert all(p.stat().st_mode & 0o044 == 0o044 for p in folder.glob("*.json"))
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-m", "instrumenter", "report", "--json", str(shared)],
                              capture_output=True, text=True, cwd="/", timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["steps"] == summary["steps"]
    finally:
        shutil.rmtree(shared.parent)


def test_report_prints_the_saved_summary_without_reading_the_traces_again(torch_run, tmp_path):
    import shutil

    folder, summary, _ = torch_run
    copy = tmp_path / "result"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("itt-*.bin"))  # the saved summary only
    again = autoitt("report", "--json", str(copy))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == summary


def test_report_reads_the_traces_again_when_they_are_newer_than_the_saved_summary(torch_run, tmp_path):
    import shutil

    folder, summary, _ = torch_run
    copy = tmp_path / "result"
    shutil.copytree(folder, copy)
    (copy / "summary.json").write_text("{}")  # not a summary: reading it would fail
    os.utime(copy / "summary.json", ns=(0, 0))
    again = autoitt("report", "--json", str(copy))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["steps"] == summary["steps"]
    assert json.loads((copy / "summary.json").read_text())["steps"] == summary["steps"]  # saved again


def test_report_works_on_a_result_folder_it_cannot_write(torch_run, monkeypatch, capsys):
    """Someone else's (or a read-only) result folder: simulated, since root may write anywhere."""
    from click.testing import CliRunner

    import instrumenter.profile.results
    from instrumenter.cli import cli

    folder, summary, _ = torch_run

    def refused(path, mode_from=None):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(instrumenter.profile.results, "atomic_writer", refused)
    result = CliRunner().invoke(cli, ["report", "--json", "--recompute", str(folder)])
    assert result.exit_code == 0, result.output
    again = json.loads(result.stdout)
    assert again["steps"] == summary["steps"]
    assert any(w.startswith("could not write") and "summary.json: Permission denied" in w for w in again["warnings"])
