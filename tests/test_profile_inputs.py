"""Bad input to ``autoitt profile`` is a clear exit 2 that leaves nothing behind; odd names are no bug."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree

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
@pytest.mark.slow
def test_odd_file_names_are_profiled(work, name):
    (work / name).write_text(STEP_LOOP)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", name, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["steps"][0]["count"] == 2
    copy = next((work / "out").glob("*_itt.py")).read_bytes()
    assert copy.count(b"\n# autoitt: instrumented copy of ") == 1  # one comment line, whatever the name


@pytest.mark.parametrize("option, value", [("--label", "6=a\x1bb"), ("--domain", "a\x1bb")], ids=["label", "domain"])
def test_a_control_character_in_a_label_or_domain_is_refused_before_anything_runs(work, option, value):
    (work / "train.py").write_text(STEP_LOOP)
    before = snapshot(work)
    result = invoke("profile", "--backend", "builtin", option, value, "train.py")
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.stderr and "'\\x1b' in 'a\\x1bb'" in result.stderr
    assert snapshot(work) == before


#: A script whose own ITT calls name a domain and a task with control characters, markup and an emoji code,
#: in a file named so too: names a run's trace holds that no command-line check saw.
ODD_NAMES = """\
import ittapi.compat as itt


class Loss:
    def backward(self):
        pass


domain = itt.domain_create("mine\\x1b[2J")
for epoch in range(2):
    itt.task_begin(domain, "ep\\x1b[31m\\n[bold]:100:\\u202e")
    for step in range(3):
        Loss().backward()
    itt.task_end(domain)
"""
ODD_FILE = "odd [bold] :100: \x1b[31m.py"
ODD_TASK = "ep\x1b[31m\n[bold]:100:\u202e"


@pytest.fixture(scope="module")
def odd_run(tmp_path_factory):
    """(result folder, finished process) of ``autoitt profile --verbose`` on :data:`ODD_NAMES`."""
    work = tmp_path_factory.mktemp("odd")
    (work / ODD_FILE).write_text(ODD_NAMES)
    done = autoitt("profile", "--backend", "builtin", "--verbose", "-r", "out", ODD_FILE, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    return work / "out", done


def test_names_from_a_run_are_printed_as_written_with_control_characters_escaped(odd_run):
    _, done = odd_run
    for printed in (done.stdout, done.stderr):
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u202e]", printed)
        assert "\N{HUNDRED POINTS SYMBOL}" not in printed
    assert "autoitt profile of odd [bold] :100: \\x1b[31m.py, builtin backend" in done.stdout
    assert "Top tasks, domain mine\\x1b[2J" in done.stdout
    assert " ep\\x1b[31m\\n[bold]:100:\\u202e " in done.stdout  # a row of that domain's table


def test_the_files_of_a_run_with_odd_names_are_well_formed_and_keep_the_names(odd_run):
    folder, _ = odd_run
    title = ElementTree.parse(folder / "steps.svg").getroot().find("{http://www.w3.org/2000/svg}text")
    assert title.text == "Step time, odd [bold] :100: \\x1b[31m.py"
    summary = json.loads((folder / "summary.json").read_text())
    assert ("mine\x1b[2J", ODD_TASK) in {(task["domain"], task["name"]) for task in summary["tasks"]}
    trace = json.loads((folder / "trace.json").read_text())
    assert ODD_TASK in {event.get("name") for event in trace["traceEvents"]}


HAND_MADE = """\
import ittapi.compat as itt

domain = itt.domain_create("mine")
{resume}for step in range(3):
    itt.task_begin(domain, "my_step")
    itt.task_end(domain)
{pause}"""


def _profile_hand_made(work, template, resumes):
    """(summary, task counts by (domain, name), the run's notes) of ``template`` with or without its own resume."""
    (work / "mine.py").write_text(template.format(resume="itt.resume()\n" if resumes else "",
                                                  pause="itt.pause()\n" if resumes else ""))
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "mine.py", cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    tasks = {(t["domain"], t["name"]): t["count"] for t in summary["tasks"]}
    notes = " ".join(json.loads((work / "out" / "run.json").read_text())["notes"])  # --json keeps stderr quiet
    return summary, tasks, notes


@pytest.mark.parametrize("resumes", [True, False], ids=["resumes-itself", "never-resumes"])
def test_a_script_instrumented_by_hand_has_its_own_markers_collected(work, resumes):
    _, tasks, notes = _profile_hand_made(work, HAND_MADE, resumes)
    assert tasks[("mine", "my_step")] == 3
    assert "is instrumented by hand (imports ittapi.compat at line 1): its own markers are collected" in notes
    assert "autoitt adds no markers" in notes  # its only loop holds its own markers
    assert ("never calls itt.resume()" in notes) is not resumes


def test_profiling_a_copy_autoitt_made_shows_its_steps(work):
    (work / "train.py").write_text(STEP_LOOP)
    assert invoke("instrument", "train.py").exit_code == 0
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "train_itt.py", cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [(s["label"], s["count"]) for s in json.loads(done.stdout)["steps"]] == [("step", 2)]


@pytest.mark.slow
def test_regions_that_never_ran_are_named_in_a_warning(work):
    (work / "train.py").write_text("import sys\n\nif len(sys.argv) > 5:\n" + "".join(
        "    " + line + "\n" for line in STEP_LOOP.splitlines()))
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "train.py", cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = json.loads(done.stdout)["warnings"]
    assert any(w.startswith("none of the marked training regions ran (train.py:9)") for w in warnings), warnings


MIXED = """\
import ittapi.compat as itt


class Loss:
    def backward(self):
        pass


domain = itt.domain_create("mine")
{resume}for epoch in range(2):
    itt.task_begin(domain, "my_epoch")
    for step in range(3):
        Loss().backward()
    itt.task_end(domain)
{pause}"""


@pytest.mark.parametrize("resumes", [True, False], ids=["resumes-itself", "never-resumes"])
@pytest.mark.slow
def test_a_script_instrumented_by_hand_gets_autoitt_steps_inside_its_own_tasks(work, resumes):
    summary, tasks, notes = _profile_hand_made(work, MIXED, resumes)
    assert tasks[("mine", "my_epoch")] == 2
    assert tasks[("autoitt.mine", "step")] == 6
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 6)]
    line = 12 if resumes else 11
    assert f"epoch loop left to the script's own markers: it holds itt.task_begin() at line {line}" in notes


def test_a_disk_that_fills_during_the_run_still_gets_its_summary_and_exits_2(work, monkeypatch):
    """Simulated ENOSPC on the post-run write of run.json: the run's records are summarized, and the exit code
    says the result folder is incomplete."""
    import errno

    from instrumenter.profile.results import RunRecord

    saves = []
    original = RunRecord.save

    def save(self, folder):
        saves.append(self)
        if len(saves) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, folder)

    monkeypatch.setattr(RunRecord, "save", save)
    (work / "train.py").write_text(STEP_LOOP)
    result = invoke("profile", "--backend", "builtin", "-r", "out", "train.py")
    assert result.exit_code == 2, result.output
    assert json.loads((work / "out" / "summary.json").read_text())["steps"][0]["count"] == 2
    assert "could not record how the run ended" in result.stderr and "No space left on device" in result.stderr
    assert "error: could not write run.json (No space left on device) in out/" in result.stderr


def test_a_launcher_not_on_path_is_an_input_error_that_leaves_nothing(work):
    (work / "train.py").write_text(STEP_LOOP)
    before = snapshot(work)
    result = invoke("profile", "--backend", "builtin", "--launcher", "no-such-torchrun --nproc_per_node 2",
                    "train.py")
    assert result.exit_code == 2
    assert "no-such-torchrun: --launcher: not found on PATH" in result.stderr
    assert snapshot(work) == before
