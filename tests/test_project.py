"""Whole projects: loops in modules that the entry script imports from its own folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from instrumenter.cli import cli
from instrumenter.sources.project import load_project
from instrumenter.runtime.window import CollectionWindow
from transforms import Mode

ENTRY = textwrap.dedent(
    """
    import torch
    import trainer as tr
    from pkg.loop import evaluate

    def main():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
        for epoch in range(2):
            tr.train_one_epoch(model, batches, optimizer)
            print(f"eval {evaluate(model, batches):.6f}")

    if __name__ == "__main__":
        main()
    """
)
TRAINER = textwrap.dedent(
    """
    import torch


    def train_one_epoch(model, batches, optimizer):
        for x, y in batches:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            print(f"loss {loss.item():.6f}")
    """
)
LOOP = textwrap.dedent(
    """
    import torch
    from .helpers import mean


    def evaluate(model, batches):
        losses = []
        with torch.no_grad():
            for x, y in batches:
                losses.append(torch.nn.functional.mse_loss(model(x), y).item())
        return mean(losses)
    """
)
HELPERS = "def mean(values):\n    return sum(values) / len(values)\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(ENTRY)
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "loop.py").write_text(LOOP)
    (tmp_path / "pkg" / "helpers.py").write_text(HELPERS)
    return tmp_path


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_loops_json_names_the_file_of_each_loop(project):
    result = CliRunner().invoke(cli, ["loops", "--json", str(project / "train.py")])
    assert result.exit_code == 0, result.output
    found = [(r["path"], r["role"], r["function"]) for r in json.loads(result.stdout)]
    assert found == [("train.py", "epoch", "main"), ("trainer.py", "step", "train_one_epoch"),
                     ("pkg/loop.py", "eval", "evaluate")]


def test_a_module_imported_under_an_alias_is_followed(project):
    names = [f.relative for f in load_project(project / "train.py", Mode()).modules]
    assert "trainer.py" in names


def test_relative_imports_inside_a_package_are_followed(project):
    names = [f.relative for f in load_project(project / "train.py", Mode()).modules]
    assert "pkg/helpers.py" in names and "pkg/loop.py" in names


def test_installed_packages_are_never_followed(project):
    names = [f.relative for f in load_project(project / "train.py", Mode()).modules]
    assert not any("torch" in name for name in names)


def test_modules_leave_collection_control_to_the_entry_script(project):
    loaded = load_project(project / "train.py", Mode())
    entry = loaded.entry.result.output.decode()
    module = next(f for f in loaded.modules if f.relative == "trainer.py").result.output.decode()
    assert "itt.resume()" in entry and "emit_itt(enabled=" in entry
    assert "itt.resume()" not in module and "itt.pause()" not in module and "emit_itt" not in module
    assert 'itt.task_begin(_autoitt_domain, "step")' in module


def test_a_module_controls_collection_when_the_entry_has_no_loop(tmp_path):
    (tmp_path / "main.py").write_text("import trainer\ntrainer.train_one_epoch(None, [], None)\n")
    (tmp_path / "trainer.py").write_text(TRAINER)
    module = load_project(tmp_path / "main.py", Mode()).modules[0].result.output.decode()
    assert "itt.resume()" in module and "itt.pause()" in module


def test_output_folder_receives_every_instrumented_file(project, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    before = snapshot(project)
    result = CliRunner().invoke(cli, ["instrument", str(project / "train.py"), "-o", f"{out}/"])
    assert result.exit_code == 0, result.output
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.py")) == ["pkg/loop.py", "train.py", "trainer.py"]
    assert snapshot(project) == before


def test_diff_shows_every_file(project):
    result = CliRunner().invoke(cli, ["instrument", str(project / "train.py"), "--diff"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n--- ") + result.stdout.startswith("--- ") == 3
    assert "trainer.py (instrumented)" in result.stdout


def test_check_counts_changes_in_modules(tmp_path):
    (tmp_path / "main.py").write_text("import trainer\ntrainer.train_one_epoch(None, [], None)\n")
    (tmp_path / "trainer.py").write_text(TRAINER)
    result = CliRunner().invoke(cli, ["instrument", str(tmp_path / "main.py"), "--check"])
    assert result.exit_code == 1


def test_windows_of_several_files_count_steps_together(monkeypatch):
    from instrumenter.runtime import window

    monkeypatch.setattr(window, "_STATES", {})

    class Recorder:
        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            return lambda *args: self.calls.append(name)

    itt = Recorder()
    monkeypatch.setattr(window, "task_begin", lambda domain, name: itt.calls.append("task_begin"))
    entry = CollectionWindow(itt, skip_steps=1, steps=1, step_tasks=("step",))
    module = CollectionWindow(itt, skip_steps=1, steps=1, step_tasks=("train.step",))
    for collection, name in ((entry, "step"), (module, "train.step")):
        collection.task_begin("d", name)
        collection.task_end("d")
    assert itt.calls == ["resume", "task_begin", "task_end", "pause"]


@pytest.mark.slow
def test_profile_runs_the_instrumented_modules_without_touching_the_folder(project, tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "result"
    before = snapshot(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    done = subprocess.run([sys.executable, "-m", "instrumenter", "profile", "--json", "-r", str(out), "train.py"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    counts = {(t["domain"], t["name"]): t["count"] for t in summary["tasks"]}
    assert counts[("autoitt.trainer", "step")] == 2 * 4
    assert counts[("autoitt.loop", "eval")] == 2 * 4
    assert summary["steps"][0]["count"] == 8
    assert snapshot(project) == before
    cached = [p.name for p in project.rglob("__pycache__/*")]
    assert not any(name.startswith(("trainer.", "loop.")) for name in cached)  # no instrumented bytecode left behind
