"""The launcher runs a profiled copy as the user's own script: their file names, their lines, their modules.

Each test profiles a small script (no framework, so it starts fast) with the
real ``autoitt profile`` in a subprocess and the built-in collector.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_profile import autoitt

#: The console script, as users run autoitt: `python -m instrumenter` in a folder that has its own
#: instrumenter.py would import that one.
AUTOITT = Path(sys.executable).with_name("autoitt")

FAKES = textwrap.dedent(
    """\
    class Loss:
        def backward(self):
            pass


    class Model:
        def __call__(self, x):
            return Loss()
    """
)

ENTRY = textwrap.dedent(
    """\
    from fakes import Model
    from trainer import train_one_epoch


    def main():
        model = Model()
        for epoch in range(2):
            train_one_epoch(model, [1, 2, 3])


    main()
    """
)

TRAINER = textwrap.dedent(
    """\
    def train_one_epoch(model, batches):
        for x in batches:
            loss = model(x)
            loss.backward()
            if x == 3:
                raise ValueError(f"diverged at batch {x}")
    """
)


def _project(folder: Path, **files: str) -> Path:
    for name, text in {"fakes": FAKES, "main": ENTRY, "trainer": TRAINER, **files}.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def _frames(stderr: str):
    """(file, line, source) of every frame of the traceback in ``stderr``."""
    return re.findall(r'File "([^"]+)", line (\d+), in \S+\n    (.*)', stderr)


def test_a_traceback_names_the_users_files_lines_and_source(tmp_path):
    folder = _project(tmp_path)
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "main.py", cwd=folder)
    assert done.returncode == 1, done.stderr[-3000:]
    frames = _frames(done.stderr)
    assert frames == [(str(folder / "main.py"), "11", "main()"),
                      (str(folder / "main.py"), "8", "train_one_epoch(model, [1, 2, 3])"),
                      (str(folder / "trainer.py"), "6", 'raise ValueError(f"diverged at batch {x}")')]
    traceback = done.stderr[done.stderr.index("Traceback"):]
    assert "ValueError: diverged at batch 3" in traceback
    assert "_itt.py" not in traceback and "instrumenter" not in traceback


def test_the_traceback_is_the_one_python_prints_for_the_original(tmp_path):
    folder = _project(tmp_path, trainer=TRAINER.replace('raise ValueError(f"diverged at batch {x}")',
                                                        "total = x + 10 / (x - 3) + 1"))
    plain = subprocess.run([sys.executable, "main.py"], cwd=folder, capture_output=True, text=True)
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "main.py", cwd=folder)
    assert done.returncode == plain.returncode == 1
    # Same frames, same source lines, same carets under the failing expression (columns are the original's).
    shown = done.stderr[done.stderr.index("Traceback"):done.stderr.index("ZeroDivisionError")]
    assert shown == plain.stderr[:plain.stderr.index("ZeroDivisionError")]


AUTOITT_FAULT = "autoitt's instrumentation, not by your script"


def test_a_scripts_own_error_is_its_own_and_the_summary_says_it_stopped_before_training(tmp_path):
    folder = _project(tmp_path, main="raise RuntimeError('no data')\n" + ENTRY)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "main.py", cwd=folder)
    assert done.returncode == 1
    assert "RuntimeError: no data" in done.stderr and AUTOITT_FAULT not in done.stderr
    (warning,) = [w for w in json.loads(done.stdout)["warnings"] if "marked training regions" in w]
    assert "ended with exit code 1 before reaching them" in warning and "did not mark" not in warning


def test_an_error_raised_by_autoitts_markers_is_said_to_be_autoitts(tmp_path):
    # as if autoitt's runtime were broken: its ITT call fails inside the training loop
    broken = "import ittapi.native\nittapi.native.task_begin = None\n" + TRAINER
    folder = _project(tmp_path, trainer=broken)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "main.py", cwd=folder)
    assert done.returncode == 1
    assert "TypeError" in done.stderr and AUTOITT_FAULT in done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    assert any(AUTOITT_FAULT in w and "TypeError" in w for w in warnings)
    assert not any("marked training regions" in w for w in warnings)


def test_a_scripts_own_name_error_is_not_autoitts(tmp_path):
    folder = _project(tmp_path, trainer=TRAINER.replace('raise ValueError(f"diverged at batch {x}")',
                                                        "print(undefined_name)"))
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "main.py", cwd=folder)
    assert done.returncode == 1 and "NameError" in done.stderr and AUTOITT_FAULT not in done.stderr


def test_a_chained_exception_hides_the_launcher_in_every_part(tmp_path):
    script = tmp_path / "chain.py"
    script.write_text(textwrap.dedent(
        """\
        class Loss:
            def backward(self):
                raise KeyError("inner")


        for step in range(2):
            try:
                Loss().backward()
            except KeyError as exc:
                raise RuntimeError("outer") from exc
        """))
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "chain.py", cwd=tmp_path)
    assert done.returncode == 1
    assert "direct cause" in done.stderr
    assert {file for file, _, _ in _frames(done.stderr)} == {str(script)}
    assert [line for _, line, _ in _frames(done.stderr)] == ["8", "3", "10"]


def test_a_script_that_exits_keeps_its_exit_code_and_prints_no_traceback(tmp_path):
    (tmp_path / "quits.py").write_text("import sys\nfor x in [1]:\n    loss.backward() if False else sys.exit(3)\n")
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "quits.py", cwd=tmp_path)
    assert done.returncode == 3
    assert "Traceback" not in done.stderr


SHADOWS = {
    "instrumenter": "WHO = 'the user instrumenter'\n",
    "transforms": "WHO = 'the user transforms'\n",
    "launch": "WHO = 'the user launch'\n",
    "random": "WHO = 'the user random'\n",  # a standard module the launcher has no need to import first
}

USES_SHADOWS = textwrap.dedent(
    """\
    import instrumenter, transforms, launch, random
    from fakes import Model

    print(instrumenter.WHO, transforms.WHO, launch.WHO, random.WHO, sep="|")
    model = Model()
    for step in range(5):
        model(step).backward()
    """
)


@pytest.mark.parametrize("options", [[], ["--skip-steps", "1", "--steps", "3"]], ids=["whole-run", "window"])
@pytest.mark.slow
def test_the_users_own_modules_named_like_autoitts_or_the_standard_librarys_are_theirs(tmp_path, options):
    folder = _project(tmp_path, main=USES_SHADOWS, **SHADOWS)
    done = subprocess.run([str(AUTOITT), "profile", "--json", "--backend", "builtin", "-r", "out", *options, "main.py"],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the user instrumenter|the user transforms|the user launch|the user random" in done.stderr
    steps = json.loads(done.stdout)["steps"]
    assert [(s["label"], s["count"]) for s in steps] == [("step", 3 if options else 5)]


USES_ITS_OWN_INSTRUMENTER_PACKAGE = textwrap.dedent(
    """\
    import instrumenter.collection
    from instrumenter import window
    from instrumenter.collection import Collection
    from fakes import Model

    print(Collection.WHO, window.WHO, instrumenter.collection.__file__.endswith("user_code/instrumenter/collection.py"))
    model = Model()
    for step in range(4):
        model(step).backward()
    """
)


@pytest.mark.parametrize("options", [[], ["--skip-steps", "1", "--steps", "2"]], ids=["whole-run", "window"])
@pytest.mark.slow
def test_a_users_own_instrumenter_package_with_autoitts_runtime_module_names_is_theirs(tmp_path, options):
    # The copy's runtime (collection, window) is autoitt's; the script's `instrumenter.collection` is the user's.
    (tmp_path / "user_code" / "instrumenter").mkdir(parents=True)
    folder = _project(tmp_path / "user_code", main=USES_ITS_OWN_INSTRUMENTER_PACKAGE)
    (folder / "instrumenter" / "__init__.py").write_text("")
    (folder / "instrumenter" / "collection.py").write_text("class Collection:\n    WHO = 'the user collection'\n")
    (folder / "instrumenter" / "window.py").write_text("WHO = 'the user window'\n")
    plain = subprocess.run([sys.executable, "main.py"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    done = subprocess.run([str(AUTOITT), "profile", "--json", "--backend", "builtin", "-r", "out", *options, "main.py"],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert plain.stdout == "the user collection the user window True\n"
    assert plain.stdout in done.stderr  # autoitt's --json run shows the script's output on stderr
    steps = json.loads(done.stdout)["steps"]
    assert [(s["label"], s["count"]) for s in steps] == [("step", 2 if options else 4)]


def test_ctrl_c_ends_the_run_by_sigint_as_python_does_showing_only_the_users_frames(tmp_path):
    import signal

    from instrumenter import launch
    from instrumenter.cli.profiling import copy_path, prepare
    from instrumenter.sources.project import load_project
    from transforms import Mode

    script, folder = tmp_path / "stopped.py", tmp_path / "out"
    script.write_text("class Loss:\n    def backward(self):\n        raise KeyboardInterrupt\n\n\n"
                      "for step in range(3):\n    Loss().backward()\n")
    folder.mkdir()
    prepare(load_project(script, Mode()), folder)
    # the command autoitt runs (python <folder>/stopped.autoitt.pyc) in the environment it runs it in
    command = launch.command(script, [], folder / "instrumentation.json")
    env = launch.environment(os.environ, script, folder / "instrumentation.json")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGINT
    assert _frames(done.stderr + "\n") == [(str(script), "7", "Loss().backward()"),
                                           (str(script), "3", "raise KeyboardInterrupt")]
