"""Under ``autoitt profile`` the program sees what ``python train.py ARGS`` shows it: its own frames only, its own
``__main__``, ``sys.argv`` and ``sys.path``, its exit codes (issue 24).

autoitt runs ``python <results>/train.autoitt.pyc ARGS``; Python imports autoitt's sitecustomize before it opens
that file, and a prologue without a line of its own sets up ``__main__`` in the script's own frame (see
``instrumenter/launch/__main__.py``). Each test runs the same script both ways, for real, and compares.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_profile import autoitt

#: A torch training loop (so autoitt instruments it) that reports what it sees of its stack and set-up, at module
#: level, inside a function and while a local module (itself instrumented) is imported. Written to REPORT.
TRAIN = textwrap.dedent(
    '''\
    """The script's docstring."""
    import faulthandler
    import inspect
    import os
    import sys
    import traceback

    import torch

    report = open(os.environ["REPORT"], "w")


    def show(where):
        print(where, "depth", len(inspect.stack()), file=report)
        print(where, [(f.filename, f.lineno, f.function) for f in inspect.stack()], file=report)
        traceback.print_stack(file=report)
        report.flush()
        faulthandler.dump_traceback(report, all_threads=False)


    show("module")
    import helper  # shows its stack while it is imported

    print("argv", sys.argv, file=report)
    print("file", __file__, file=report)
    print("path0", sys.path[0], file=report)
    print("loader", type(__loader__).__name__, __loader__.name, __loader__.path, file=report)
    print("spec cached doc", __spec__, __cached__, __doc__, file=report)
    print("orig_argv tail", sys.orig_argv[-len(sys.argv):], file=report)
    print("helper", helper.__file__, helper.__cached__, type(helper.__loader__).__name__, file=report)
    print("excepthook is Python's", sys.excepthook is sys.__excepthook__, file=report)
    print("modules", [m for m in ("sitecustomize", "_autoitt_main") if m in sys.modules], file=report)
    print("path has autoitt", any("launch" in p and "site" in p for p in sys.path), file=report)

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        loss = model(torch.ones(8, 4)).sum()
        loss.backward()
        optimizer.step()
        if step == 1:
            helper.nested(show)
    '''
)

HELPER = textwrap.dedent(
    """\
    import __main__


    def nested(show):
        show("nested")


    for step in range(1):
        pass
    __main__.show("import")
    """
)


def _normalized(text: str, folder: Path) -> str:
    # the thread's id is the only thing that differs from run to run
    return re.sub(r"0x[0-9a-f]+", "0x...", text).replace(str(folder), "<tmp>")


def _plain_and_profiled(folder: Path, script: str, *args: str):
    """(plain report, profiled report, the profile's JSON summary) of ``script`` run from ``folder``."""
    plain = subprocess.run([sys.executable, script, *args], cwd=folder, env={**os.environ, "REPORT": "plain.txt"},
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", script, *args, cwd=folder,
                   env={"REPORT": "profiled.txt"})
    assert done.returncode == 0, done.stderr[-3000:]
    return ((folder / "plain.txt").read_text(), (folder / "profiled.txt").read_text(), json.loads(done.stdout))


def _project(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    (folder / "helper.py").write_text(HELPER)
    return folder


@pytest.mark.slow
def test_the_stack_inspect_traceback_and_faulthandler_show_is_the_one_python_shows(tmp_path):
    plain, profiled, summary = _plain_and_profiled(_project(tmp_path), "train.py", "--epochs", "1")
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 3)]  # it was instrumented
    # show() from the module: 2 frames, as the script sees them without autoitt (it saw 5 under the old launcher)
    assert "module depth 2" in plain and "nested depth 3" in plain
    assert _normalized(profiled, tmp_path) == _normalized(plain, tmp_path)


@pytest.mark.slow
def test_inside_the_exit_code_wrapper_vtune_runs_the_stack_is_still_the_scripts_own(tmp_path):
    """With AUTOITT_EXIT_DIR (the VTune backend) the body runs inside a ``with``: no frame, no line of its own."""
    from instrumenter import launch
    from instrumenter.cli.profiling import prepare
    from instrumenter.sources.project import load_project
    from transforms import Mode

    script, folder = _project(tmp_path) / "train.py", tmp_path / "out"
    folder.mkdir()
    prepare(load_project(script, Mode(launched=True)), folder)
    env = launch.environment({**os.environ, "REPORT": "profiled.txt"}, Path("train.py"), folder / "instrumentation.json")
    env[launch.EXIT_DIR_VARIABLE] = str(tmp_path / "exit")
    done = subprocess.run(launch.command(Path("train.py"), ["x"], folder / "instrumentation.json"), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    plain = subprocess.run([sys.executable, "train.py", "x"], cwd=tmp_path, env={**os.environ, "REPORT": "plain.txt"},
                           capture_output=True, text=True, timeout=300)
    assert done.returncode == plain.returncode == 0, done.stderr
    assert [p.read_text() for p in (tmp_path / "exit").iterdir()] == ["0\n"]
    assert _normalized((tmp_path / "profiled.txt").read_text(), tmp_path) == \
        _normalized((tmp_path / "plain.txt").read_text(), tmp_path)


@pytest.mark.slow
def test_main_argv_path_and_loader_are_as_under_python_script(tmp_path):
    """Every line of the report after the stacks: sys.argv, __file__ (absolute), sys.path[0], __loader__ (a
    SourceFileLoader of the script), __spec__ and __cached__ (None), __doc__, sys.orig_argv's tail, the local
    module's __file__/__cached__/loader, sys.excepthook, no sitecustomize or prologue left in sys.modules, and no
    folder of autoitt's on sys.path. The script is named by a relative path from another folder."""
    _project(tmp_path / "src")
    plain, profiled, _ = _plain_and_profiled(tmp_path, "src/train.py", "a", "--b=1")
    report = [line for line in plain.splitlines() if line.split(" ")[0] in (
        "argv", "file", "path0", "loader", "spec", "orig_argv", "helper", "excepthook", "modules", "path")]
    assert len(report) == 10
    assert "argv ['src/train.py', 'a', '--b=1']" in report and f"path0 {tmp_path / 'src'}" in report
    assert "modules []" in report and "path has autoitt False" in report
    assert [line for line in profiled.splitlines() if line in report] == report


# -- exit codes ----------------------------------------------------------------------------------------------------

LOOP = "class Loss:\n    def backward(self):\n        pass\n\n\nfor step in range(2):\n    Loss().backward()\n"


@pytest.mark.parametrize("ending, code", [("", 0), ("import sys\nsys.exit(3)\n", 3),
                                          ("raise RuntimeError('diverged')\n", 1),
                                          ("import sys\nsys.exit('bye')\n", 1)])
def test_the_exit_code_is_the_scripts(tmp_path, ending, code):
    (tmp_path / "ends.py").write_text(LOOP + ending)
    plain = subprocess.run([sys.executable, "ends.py"], cwd=tmp_path, capture_output=True, text=True)
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "ends.py", cwd=tmp_path)
    assert done.returncode == plain.returncode == code
    if code:
        assert plain.stderr in done.stderr  # the same traceback (or message), nothing of autoitt's in it


# -- what the caller hands the process ----------------------------------------------------------------------------

#: Reads the file named by its argument (bash's ``<(...)`` is a /dev/fd/N name) and a descriptor number it is told,
#: and says what SIGHUP does; a training loop, so autoitt instruments it.
INHERITS = LOOP + """
import os, signal, sys
print("config", open(sys.argv[1]).read().strip())
print("fd", os.read(int(sys.argv[2]), 100).decode().strip())
print("sighup ignored", signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)
"""


def _run_inheriting(folder: Path, *command: str) -> str:
    """``command`` run by bash with a process substitution, descriptor 7 open on a file, and SIGHUP ignored
    (as ``nohup`` leaves it): what the script printed."""
    (folder / "given.txt").write_text("seven\n")
    line = " ".join(command) + " <(echo lr=0.1) 7 7<given.txt"
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    done = subprocess.run(["bash", "-c", line], cwd=folder, env=environment, capture_output=True, text=True,
                          timeout=300, preexec_fn=nohup)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_descriptors_and_ignored_signals_the_caller_hands_down_are_the_scripts(tmp_path):
    (tmp_path / "train.py").write_text(INHERITS)
    plain = _run_inheriting(tmp_path, sys.executable, "train.py")
    profiled = _run_inheriting(tmp_path, sys.executable, "-m", "instrumenter", "profile", "--backend", "builtin",
                               "-r", "out", "train.py")
    assert plain.splitlines() == ["config lr=0.1", "fd seven", "sighup ignored True"]
    assert all(line in profiled.splitlines() for line in plain.splitlines()), profiled[-3000:]


def test_a_script_named_like_the_itt_package_autoitt_imports_runs_once_as_itself(tmp_path):
    # the copy's header imports ittapi.compat; the script's folder heads sys.path, and ittapi.py there took its place
    (tmp_path / "ittapi.py").write_text(LOOP + "print('trained')\n")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "ittapi.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("trained") == 1
    assert json.loads(done.stdout)["steps"][0]["count"] == 2


@pytest.mark.parametrize("exit_dir", [False, True], ids=["builtin", "with-exit-dir"])
def test_ctrl_c_ends_the_process_by_sigint_with_the_same_traceback(tmp_path, exit_dir):
    """Run as autoitt runs it; with AUTOITT_EXIT_DIR (VTune) the body runs inside the prologue's ``with``."""
    from instrumenter import launch
    from instrumenter.cli.profiling import prepare
    from instrumenter.sources.project import load_project
    from transforms import Mode

    script, folder = tmp_path / "stopped.py", tmp_path / "out"
    script.write_text(LOOP.replace("pass", "raise KeyboardInterrupt"))
    folder.mkdir()
    prepare(load_project(script, Mode(launched=True)), folder)
    env = launch.environment(os.environ, script, folder / "instrumentation.json")
    if exit_dir:
        env[launch.EXIT_DIR_VARIABLE] = str(tmp_path / "exit")
    done = subprocess.run(launch.command(script, [], folder / "instrumentation.json"), env=env,
                          capture_output=True, text=True, timeout=60)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == plain.returncode == -signal.SIGINT
    assert done.stderr == plain.stderr
    if exit_dir:
        assert [p.read_text() for p in (tmp_path / "exit").iterdir()] == ["130\n"]


# -- what tracers see, the user's sitecustomize, and interpreter flags that would skip autoitt's ------------------

USER_SITE = textwrap.dedent(
    """\
    import atexit, os, sys

    events = []


    def tracer(frame, event, arg):
        if frame.f_code.co_filename.endswith("plain.py") and frame.f_code.co_name == "<module>":
            events.append((event, frame.f_lineno))
        return tracer


    sys.settrace(tracer)
    if any(arg.endswith("plain.py") for arg in sys.orig_argv):
        print("the user's sitecustomize sees", sys.argv, sys.orig_argv[1:])
    atexit.register(lambda: events and print("events", events))  # (autoitt's own process runs no plain.py)
    """
)


def test_a_tracer_the_users_sitecustomize_sets_sees_the_scripts_line_events_only(tmp_path):
    """The user's own sitecustomize (on PYTHONPATH behind autoitt's) runs before the script, as it would, and sees
    the script's sys.argv and sys.orig_argv; the
    prologue autoitt puts first in the script's code has no line: the tracer sees the lines it sees without
    autoitt. (The script has no loop: nothing is instrumented, the prologue alone differs.)"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(USER_SITE)
    (tmp_path / "plain.py").write_text('"""doc"""\nfrom __future__ import annotations\nx = 1\n\nprint("x", x)\n')
    env = {"PYTHONPATH": str(site)}
    plain = subprocess.run([sys.executable, "plain.py"], cwd=tmp_path, env={**os.environ, **env},
                           capture_output=True, text=True)
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "plain.py", cwd=tmp_path, env=env)
    assert plain.returncode == done.returncode == 0, done.stderr
    events = [line for line in plain.stdout.splitlines() if line.startswith("events")]
    assert events and events[0].startswith("events [('call', 0), ('line', 1), ('line', 2), ('line', 3)")
    assert [line for line in done.stdout.splitlines() + done.stderr.splitlines() if line.startswith("events")] \
        == events
    seen = "the user's sitecustomize sees ['plain.py'] ['plain.py']"
    assert seen in plain.stdout.splitlines() and seen in done.stdout.splitlines()


@pytest.mark.parametrize("flag", ["-E", "-I", "-S"])
def test_flags_that_skip_autoitts_sitecustomize_fail_saying_so(tmp_path, flag):
    """A launcher's interpreter flags that stop Python from importing the sitecustomize: exit 1 with autoitt's
    reason, never "can't open file" nor the script running uninstrumented."""
    from instrumenter import launch
    from instrumenter.cli.profiling import prepare
    from instrumenter.sources.project import load_project
    from transforms import Mode

    script, folder = tmp_path / "s.py", tmp_path / "out"
    script.write_text(LOOP)
    folder.mkdir()
    prepare(load_project(script, Mode(launched=True)), folder)
    launch.write_placeholder(folder / "instrumentation.json", script)
    python, *rest = launch.command(script, [], folder / "instrumentation.json")
    env = launch.environment(os.environ, script, folder / "instrumentation.json")
    done = subprocess.run([python, flag, *rest], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == launch.NO_SITECUSTOMIZE
    # and after a run has written the copy's code there, the same
    subprocess.run([python, *rest], env=env, check=True, capture_output=True, timeout=60)
    done = subprocess.run([python, flag, *rest], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.strip() == launch.NO_SITECUSTOMIZE


def test_a_placeholder_run_where_the_sitecustomize_is_missing_blames_the_install_not_the_flags(tmp_path, monkeypatch):
    """An install without the sitecustomize (a wheel built without its data files) and a run that skipped it say
    different things: the placeholder looks for the file when it runs."""
    from instrumenter import launch

    script, folder = tmp_path / "s.py", tmp_path / "out"
    script.write_text("print('ran')\n")
    folder.mkdir()
    gone = tmp_path / "site" / "sitecustomize.py"
    monkeypatch.setattr(launch, "RUN_TIME_FILES", (gone, *launch.RUN_TIME_FILES[1:]))
    pyc = launch.write_placeholder(folder / "instrumentation.json", script)
    done = subprocess.run([sys.executable, str(pyc)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"autoitt: {gone}: {launch.INCOMPLETE_INSTALL}"
