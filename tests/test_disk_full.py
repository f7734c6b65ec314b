"""A disk that fills up: ``autoitt profile`` says what it could not write, exits 2 (the environment's to fix, not
autoitt's bug), lists only the files there are, leaves nothing half written, and says when the trace holds fewer
steps than ran.

A real full disk where the tests run as root (a small tmpfs mounted for the test), and failures injected at the
one path results are written through (``instrumenter.profile.results.save_outputs``) otherwise.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_helpers import invoke
from tests.test_profile import autoitt
from tests.contexts import read_context

STEP_LOOP = "class Loss:\n    def backward(self):\n        pass\n\n\nfor step in range({steps}):\n    Loss().backward()\n"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of a given size, mounted for the test: ``small_disk(kib)`` -> its folder."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs a tmpfs mount, which needs root")
    mounted = []

    def mount(kib: int) -> Path:
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _listed(output: str) -> str:
    """The result files the summary's last line lists ("" when it says there are none)."""
    found = re.search(r"(?:Results in \S+/: (.*?)|No trace\.json, steps\.svg or summary\.json in \S+/); `autoitt report",
                      " ".join(output.split()))
    assert found, output
    return found.group(1) or ""


def test_results_that_cannot_be_written_exit_2_and_only_the_files_written_are_listed(work, monkeypatch):
    import instrumenter.profile.results

    real = instrumenter.profile.results.atomic_writer

    def full_for_some(path, mode_from=None):
        if path.name in ("trace.json", "steps.svg"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, mode_from)

    monkeypatch.setattr(instrumenter.profile.results, "atomic_writer", full_for_some)
    (work / "train.py").write_text(STEP_LOOP.format(steps=3))
    result = invoke("profile", "--backend", "builtin", "-r", "out", "train.py")
    assert result.exit_code == 2, result.output
    assert "error: could not write trace.json, steps.svg (No space left on device) in out/" in result.stderr
    assert "internal error" not in result.output
    assert _listed(result.stdout) == "report.html (open in a browser), summary.json"
    assert sorted(p.name for p in (work / "out").iterdir() if p.name.endswith((".json", ".svg"))) == \
        ["instrumentation.json", "loops.json", "run.json", "summary.json"]


def test_a_report_of_a_folder_it_may_not_write_is_no_error_but_a_full_disk_is(work, monkeypatch):
    import instrumenter.profile.results

    (work / "train.py").write_text(STEP_LOOP.format(steps=3))
    assert invoke("profile", "--backend", "builtin", "-r", "out", "train.py").exit_code == 0
    for error, code in ((errno.EACCES, 0), (errno.EROFS, 0), (errno.ENOSPC, 2), (errno.EIO, 2)):
        def refused(path, mode_from=None):
            raise OSError(error, os.strerror(error))

        monkeypatch.setattr(instrumenter.profile.results, "atomic_writer", refused)
        result = invoke("report", "--recompute", "out")
        assert result.exit_code == code, (errno.errorcode[error], result.output)
        assert ("error: could not write" in result.stderr) == bool(code)


def test_a_disk_full_before_the_run_is_exit_2_and_leaves_nothing(work, small_disk):
    disk = small_disk(8)
    (work / "train.py").write_text(STEP_LOOP.format(steps=3))
    done = autoitt("profile", "--backend", "builtin", "-r", str(disk / "out"), "train.py", cwd=work)
    assert done.returncode == 2, done.stderr
    assert f"error: {disk / 'out'}: cannot write the result folder (No space left on device); the script was not " \
           "run, and nothing was kept there" in done.stderr
    assert "internal error" not in done.stderr
    assert list(disk.iterdir()) == []


def test_a_disk_that_fills_during_the_run_says_how_many_steps_the_summary_covers(work, small_disk):
    disk = small_disk(160)
    (work / "train.py").write_text(STEP_LOOP.format(steps=30000))
    done = autoitt("profile", "--backend", "builtin", "--sample-rate", "0", "-r", str(disk / "out"), "train.py",
                   cwd=work)
    assert done.returncode == 2, done.stderr
    out = done.stdout.replace("\n", " ")
    steps = re.search(r"Step time \(step, (\d+) (of at least (\d+) steps that ran|steps); the trace was cut short", out)
    assert steps, out
    assert 0 < int(steps.group(1)) < 30000 and int(steps.group(3) or steps.group(1)) >= int(steps.group(1))
    unwritten = re.search(r"error: could not write (.*) \(No space left on device\) in ", done.stderr)
    assert unwritten, done.stderr
    listed = _listed(done.stdout)
    for name in ("trace.json", "steps.svg", "summary.json"):
        # a file is listed if and only if it is there, and named in the error if and only if it is not
        assert (name in listed) == (disk / "out" / name).is_file() != (name in unwritten.group(1))
    assert not [p.name for p in (disk / "out").iterdir() if p.name.endswith(".autoitt-tmp")]


BUSY_STEPS = """\
import time


class Loss:
    def backward(self):
        started = time.process_time()
        while time.process_time() - started < 0.005:
            pass


for step in range(400):
    Loss().backward()
"""


def test_on_a_disk_that_fills_the_samples_give_way_to_the_trace(work, small_disk):
    # 1000 samples a second of a few KiB each filled 100 KiB before the trace's first chunk: 293 of 400 steps
    disk = small_disk(100)
    (work / "train.py").write_text(BUSY_STEPS)
    done = autoitt("profile", "--backend", "builtin", "--sample-rate", "1000", "-r", str(disk / "out"), "train.py",
                   cwd=work, env={"AUTOITT_SAMPLE_MECHANISM": "perf"})
    out = done.stdout.replace("\n", " ")
    assert "Step time (step, 400 steps)" in out, out[-3000:]
    assert "samples were no longer written from" in out and "the samples leave" in out


def test_a_trace_cut_short_shows_its_steps_of_at_least_those_that_began(tmp_path):
    """The reader's side, with a file cut as a full disk cuts it (its last chunk partly written)."""
    from io import StringIO

    from rich.console import Console

    from instrumenter.builtin.statistics.aggregate import aggregate
    from instrumenter.builtin.statistics.intervals import Keep
    from instrumenter.builtin.output.render import render
    from instrumenter.builtin.trace.scan import scan_trace_dir
    from instrumenter.builtin.statistics.taskstats import cut_steps, summarize
    from tests.trace_writer import TraceWriter

    domain = "autoitt.train"
    writer = TraceWriter(tmp_path / "itt-100.bin")
    steps = [event for i in range(6) for event in (("begin", 10 * i, domain, "step"), ("end", 10 * i + 5, domain, None))]
    writer.events(100, [*steps, ("begin", 60, domain, "step")])  # the seventh step began in this chunk...
    writer.events(100, [("end", 65, domain, None), ("begin", 70, domain, "step"), ("end", 75, domain, None)])
    writer.close()
    data = (tmp_path / "itt-100.bin").read_bytes()
    # ...and ended in the one the disk had no room for: none of its three records whole
    (tmp_path / "itt-100.bin").write_bytes(data[:-90])
    scans, _ = scan_trace_dir(tmp_path)
    traces = [trace for trace, _blocks in scans]
    found = aggregate(scans, [domain], Keep())
    context = read_context(["step"], [domain])
    summary = summarize(found, context)
    summary.steps = cut_steps(summary.steps, found.kept, found.groups, context, [t.pid for t in traces if t.cut])
    assert [(step.count, step.ran_at_least) for step in summary.steps] == [(6, 7)]
    out = StringIO()
    render(summary, Console(file=out, width=300), script="train.py", result_dir=tmp_path, instrumentation=None)
    assert "Step time (step, 6 of at least 7 steps that ran; the trace was cut short" in out.getvalue()


def test_a_trace_read_to_its_end_says_nothing_of_a_cut(tmp_path):
    from instrumenter.builtin.statistics.aggregate import aggregate
    from instrumenter.builtin.statistics.intervals import Keep
    from instrumenter.builtin.trace.scan import scan_trace_dir
    from instrumenter.builtin.statistics.taskstats import cut_steps, summarize
    from tests.trace_writer import write_events

    domain = "autoitt.train"
    write_events(tmp_path / "itt-100.bin", {100: [("begin", 0, domain, "step"), ("end", 5, domain, None),
                                                  ("begin", 10, domain, "step")]})  # stopped inside a step
    scans, _ = scan_trace_dir(tmp_path)
    found = aggregate(scans, [domain], Keep())
    context = read_context(["step"], [domain])
    steps = summarize(found, context).steps
    assert [step.ran_at_least for step in cut_steps(steps, found.kept, found.groups, context,
                                                    [t.pid for t, _ in scans if t.cut])] == [0]
