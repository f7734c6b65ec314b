"""Every way a profiled run ends: the script stops as it would without autoitt, what was recorded is kept,
and autoitt exits with the status a shell would report.

Real signals to a real process group (autoitt started in a session of its own,
as a terminal would), the real built-in collector.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_helpers import default_signals
from tests.test_profile import autoitt

#: Trains until stopped; says so in a file after its third step.
ENDLESS = """\
import pathlib, time


class Loss:
    def backward(self):
        time.sleep(0.02)


for step in range(100000):
    Loss().backward()
    if step == 2:
        pathlib.Path("started").write_text("yes")
"""


#: Trains until stopped (ENDLESS); saves a checkpoint on SIGUSR1 (as a scheduler's warning asks) and goes on.
CHECKPOINTS = """\
import pathlib, signal


def save(signum, frame):
    pathlib.Path("checkpoint").write_text(f"saved at step {step}")


signal.signal(signal.SIGUSR1, save)
""" + ENDLESS

#: Trains until Ctrl-C; then takes its time to clean up, which a second KeyboardInterrupt would cut short.
ONE_INTERRUPT = """\
import pathlib, sys, time


class Loss:
    def backward(self):
        time.sleep(0.02)


try:
    for step in range(100000):
        Loss().backward()
        if step == 2:
            pathlib.Path("started").write_text("yes")
except KeyboardInterrupt:
    time.sleep(1.0)  # saving what it has
    print("cleaned up after one KeyboardInterrupt")
    sys.exit(9)
"""


def _start(folder: Path, script: str = ENDLESS, **popen) -> subprocess.Popen:
    (folder / "train.py").write_text(script)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "start_new_session": True,
             "preexec_fn": default_signals, **popen}  # as a terminal starts it, not as the test run was
    process = subprocess.Popen([sys.executable, "-m", "instrumenter", "profile", "--json", "--backend", "builtin",
                                "-r", "out", "train.py"], cwd=folder, env=environment, text=True, **popen)
    deadline = time.monotonic() + 120
    while not (folder / "started").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    return process


def _script_pids(folder: Path):
    # the script's process runs python <result folder>/train.autoitt.pyc (instrumenter.launch.command)
    found = subprocess.run(["pgrep", "-f", str(folder / "out" / "train.autoitt.pyc")],
                           capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def _finish(process: subprocess.Popen):
    out, err = process.communicate(timeout=120)
    return process.returncode, (json.loads(out) if out.strip() else None), err


def test_sigterm_to_autoitt_alone_stops_the_script_and_keeps_its_steps(tmp_path):
    process = _start(tmp_path)
    os.kill(process.pid, signal.SIGTERM)  # a scheduler, or `kill`, names autoitt only
    code, summary, err = _finish(process)
    assert code == 128 + signal.SIGTERM
    assert summary["steps"][0]["count"] >= 3  # flushed by the collector on the way out
    assert "was stopped by SIGTERM, exit status 143" in err
    assert not _script_pids(tmp_path)


def test_ctrl_c_to_the_process_group_exits_130_with_the_steps_so_far(tmp_path):
    process = _start(tmp_path)
    os.killpg(process.pid, signal.SIGINT)
    code, summary, err = _finish(process)
    assert code == 128 + signal.SIGINT
    assert summary["steps"][0]["count"] >= 3
    assert "KeyboardInterrupt" in err and "exit status 130" in err


def test_sigint_to_autoitt_alone_stops_the_script_as_ctrl_c_would(tmp_path):
    process = _start(tmp_path)
    os.kill(process.pid, signal.SIGINT)  # `kill -INT`, a supervisor: autoitt's pid only, not the terminal's group
    code, summary, err = _finish(process)
    assert code == 128 + signal.SIGINT, err[-3000:]
    assert "KeyboardInterrupt" in err
    assert summary["steps"][0]["count"] >= 3


def test_sigusr1_to_autoitt_reaches_the_scripts_handler_and_the_run_goes_on(tmp_path):
    process = _start(tmp_path, CHECKPOINTS)
    os.kill(process.pid, signal.SIGUSR1)  # scancel --signal=USR1, a preemption warning
    deadline = time.monotonic() + 60
    while not (tmp_path / "checkpoint").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGTERM)
    code, summary, err = _finish(process)
    assert (tmp_path / "checkpoint").read_text().startswith("saved at step")
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert summary["steps"][0]["count"] >= 3


def _controlling_terminal(slave: int):
    def become() -> None:  # the child, a session leader of its own: the pty becomes its controlling terminal
        import fcntl
        import termios

        default_signals()
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    return become


def test_ctrl_c_at_a_terminal_is_one_keyboard_interrupt_for_the_script(tmp_path):
    import pty

    master, slave = pty.openpty()
    try:
        process = _start(tmp_path, ONE_INTERRUPT, stdin=slave, start_new_session=False,
                         preexec_fn=_controlling_terminal(slave))
        os.write(master, b"\x03")  # the terminal's Ctrl-C: SIGINT from the kernel to the foreground group
        code, _summary, err = _finish(process)
    finally:
        os.close(master)
        os.close(slave)
    assert code == 9, err[-3000:]  # a second KeyboardInterrupt (autoitt passing the terminal's on) ends it 130
    assert "cleaned up after one KeyboardInterrupt" in err


def test_sighup_to_the_group_ends_the_run_as_a_hangup(tmp_path):
    process = _start(tmp_path)
    os.killpg(process.pid, signal.SIGHUP)
    code, summary, err = _finish(process)
    assert code == 128 + signal.SIGHUP
    assert summary["steps"] and summary["steps"][0]["count"] >= 3, (summary["warnings"], err)


def test_a_killed_autoitt_leaves_no_training_process_behind(tmp_path):
    process = _start(tmp_path)
    assert _script_pids(tmp_path)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while _script_pids(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _script_pids(tmp_path)


@pytest.mark.slow
def test_the_report_of_a_run_whose_autoitt_was_killed_says_its_elapsed_time_is_unknown(tmp_path):
    process = _start(tmp_path)
    os.kill(process.pid, signal.SIGKILL)  # run.json keeps what it said when the run started
    process.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while _script_pids(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    shown = autoitt("report", str(tmp_path / "out"))
    assert shown.returncode == 0, shown.stderr
    assert "elapsed unknown" in shown.stdout and "elapsed 0.0" not in shown.stdout
    summary = json.loads(autoitt("report", "--json", str(tmp_path / "out")).stdout)
    assert summary["elapsed_s"] is None
    assert summary["steps"][0]["count"] >= 3  # what the script recorded before it was stopped
    assert any("end was not recorded" in warning for warning in summary["warnings"])


@pytest.mark.slow
def test_a_crash_exits_139_and_keeps_the_steps_completed_before_it(tmp_path):
    (tmp_path / "crash.py").write_text(
        "import ctypes\n\n\nclass Loss:\n    def backward(self):\n        pass\n\n\n"
        "for step in range(5):\n    Loss().backward()\n    if step == 3:\n        ctypes.string_at(0)\n")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "crash.py", cwd=tmp_path)
    assert done.returncode == 128 + signal.SIGSEGV
    assert json.loads(done.stdout)["steps"][0]["count"] == 3
    assert "was stopped by SIGSEGV, exit status 139" in done.stderr


def test_a_script_exit_code_is_autoitts(tmp_path):
    (tmp_path / "fails.py").write_text("import sys\nsys.exit(3)\n")
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "fails.py", cwd=tmp_path)
    assert done.returncode == 3
    assert "fails.py exited with code 3 (results so far are in out/)" in done.stderr


def test_ctrl_c_during_the_summary_says_how_to_finish_it(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from instrumenter.builtin import BuiltinBackend
    from instrumenter.cli import cli

    def interrupted(self, folder, context):
        raise KeyboardInterrupt

    monkeypatch.setattr(BuiltinBackend, "read", interrupted)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick.py").write_text("print('hi')\n")
    result = CliRunner().invoke(cli, ["profile", "--backend", "builtin", "-r", "out", "quick.py"])
    assert result.exit_code == 128 + signal.SIGINT
    assert "summary interrupted; `autoitt report out` prints it" in result.stderr
    assert "Aborted" not in result.output
