"""The VTune backend of ``autoitt profile``: command lines, report parsing, failures, per-rank results.

VTune itself cannot be installed here (it is proprietary). These tests check
autoitt against VTune's documented command line: the exact command lines it
builds, the documented CSV shapes of ``vtune -report``, and end to end runs
against ``tests/vtune_standin/vtune``, a stand-in written from that
documentation that validates the options it gets, runs the target with
autoitt's built-in ITT collector and answers reports in the documented shapes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from instrumenter.launch import EXIT_DIR_VARIABLE
from instrumenter.profile.options import VTuneOptions, parse_analyses, split_args
from instrumenter.cli.profiling import prepare
from instrumenter.sources.project import load_project
from instrumenter.vtune.collect import hints, result_dirs
from instrumenter.vtune.commands import VTuneConfig, collect_command, report_command
from instrumenter.vtune.csv_reports import (FunctionRow, ReportFormatError, error_lines, metric, parse_functions,
                                            parse_summary, parse_tasks, read_result)
from instrumenter.vtune.read import source_mapper
from transforms import Mode
from tests.conftest import ROOT
from tests.scripts import TORCH_TRAIN_SEEDED
from tests.test_profile import autoitt as run_autoitt

STANDIN = ROOT / "tests" / "vtune_standin"
VTUNE = "/opt/intel/oneapi/vtune/latest/bin64/vtune"
PYTHON = "/nonexistent/venv/bin/python"
#: The target as autoitt runs it (instrumenter.launch.command): the script's .pyc in the result folder, its arguments.
TARGET = (PYTHON, "/runs/train-1/train.autoitt.pyc", "--epochs", "1")


def config(launcher=(), **options) -> VTuneConfig:
    return VTuneConfig(vtune=VTUNE, target=TARGET, copy=Path("/runs/train-1/train_itt.py"),
                       script=Path("/src/train.py"), results=Path("/runs/train-1"), options=VTuneOptions(**options),
                       launcher=launcher)


HOTSPOTS = [VTUNE, "-collect", "hotspots", "-start-paused",
            "-knob", "sampling-mode=sw", "-knob", "enable-stack-collection=true",
            "-search-dir", "/nonexistent/venv/bin",
            "-source-search-dir", "/runs/train-1", "-source-search-dir", "/src",
            "-data-limit", "0", "-result-dir", "/runs/train-1/hotspots", "--", *TARGET]
UARCH = [VTUNE, "-collect", "uarch-exploration", "-start-paused",
         "-knob", "collect-memory-bandwidth=true",
         "-search-dir", "/nonexistent/venv/bin",
         "-source-search-dir", "/runs/train-1", "-source-search-dir", "/src",
         "-data-limit", "0", "-result-dir", "/runs/train-1/uarch", "--", *TARGET]


# -- the command lines ----------------------------------------------------------------------------------------------

def test_default_command_lines_are_the_recipes_hotspots_then_uarch():
    assert VTuneOptions().analyses == ("hotspots", "uarch")
    assert collect_command(config(), "hotspots") == HOTSPOTS
    assert collect_command(config(), "uarch") == UARCH


def test_analysis_list_chooses_and_always_runs_hotspots_first():
    assert parse_analyses("hotspots") == ("hotspots",)
    assert parse_analyses("uarch") == ("uarch",)
    assert parse_analyses("uarch,hotspots") == ("hotspots", "uarch")


@pytest.mark.parametrize("text", ["", "memory", "hotspots,threading", "hotspots uarch"])
def test_analysis_list_rejects_unknown_names(text):
    with pytest.raises(ValueError):
        parse_analyses(text)


def test_hw_sampling_switches_the_hotspots_knob_only():
    assert collect_command(config(sampling_mode="hw"), "hotspots") == [
        arg.replace("sampling-mode=sw", "sampling-mode=hw") for arg in HOTSPOTS]
    assert collect_command(config(sampling_mode="hw"), "uarch") == UARCH


def test_vtune_args_go_last_before_the_target_in_every_collection():
    extra = split_args(["-knob sampling-interval=5", "-finalization-mode=deferred"])
    assert extra == ("-knob", "sampling-interval=5", "-finalization-mode=deferred")
    command = collect_command(config(extra_args=extra), "uarch")
    assert command == UARCH[:UARCH.index("--")] + list(extra) + UARCH[UARCH.index("--"):]


def test_data_limit_is_always_passed():
    command = collect_command(config(data_limit_mb=500), "hotspots")
    assert command[command.index("-data-limit") + 1] == "500"


def test_a_launcher_wraps_vtune_not_the_target():
    command = collect_command(config(launcher=tuple(split_args(["mpirun -n 4"]))), "hotspots")
    assert command == ["mpirun", "-n", "4", *HOTSPOTS]


def test_under_torchrun_vtune_runs_as_a_program_with_a_result_folder_per_rank():
    """Checked against VTune's documented CLI (VTune cannot be installed here): torchrun runs ``vtune`` only with
    ``--no-python`` (else it runs it as a Python script), and VTune names per-rank results only from MPI's
    PMI_RANK, so each torchrun worker's shell gives ``-result-dir`` its ``$RANK``; vtune's arguments are otherwise
    those of a run without a launcher."""
    command = collect_command(config(launcher=("torchrun", "--standalone", "--nproc_per_node", "2")), "hotspots")
    assert command[:7] == ["torchrun", "--no-python", "--standalone", "--nproc_per_node", "2", "sh", "-c"]
    per_rank = [arg.replace("/runs/train-1/hotspots", "/runs/train-1/hotspots.$RANK") for arg in HOTSPOTS]
    assert shlex.split(command[7]) == ["exec", *per_rank] and len(command) == 8


def test_each_torchrun_ranks_shell_expands_its_rank_and_nothing_else(tmp_path):
    target = ("/my venv/bin/python", "/r/s.autoitt.pyc", "$HOME", "it's")
    spaced = VTuneConfig(vtune="/opt/my vtune/vtune", target=target, copy=Path("/r/c.py"), script=Path("/s/s.py"),
                         results=tmp_path / "my results", launcher=("torchrun",))
    command = collect_command(spaced, "uarch")
    script = command[command.index("-c") + 1].replace("exec ", "exec printf '%s\\n' ", 1)  # print vtune's argv
    argv = subprocess.run(["sh", "-c", script], env={"RANK": "3", "HOME": "/home/x"}, capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert argv[0] == "/opt/my vtune/vtune"
    assert argv[argv.index("-result-dir") + 1] == str(tmp_path / "my results" / "uarch.3")
    assert argv[argv.index("--") + 1:] == list(target)


def test_paths_with_spaces_stay_single_arguments():
    target = ("/my venv/bin/python", "/my runs/t 1/my train.autoitt.pyc")
    spaced = VTuneConfig(vtune="/opt/my vtune/vtune", target=target, copy=Path("/my runs/t 1/train_itt.py"),
                         script=Path("/my src/my train.py"), results=Path("/my runs/t 1"))
    command = collect_command(spaced, "hotspots")
    assert command[0] == "/opt/my vtune/vtune"
    assert command[command.index("-search-dir") + 1] == "/my venv/bin"
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "-source-search-dir"] == ["/my runs/t 1",
                                                                                            "/my src"]
    assert command[command.index("-result-dir") + 1] == "/my runs/t 1/hotspots"
    assert command[command.index("--") + 1:] == list(target)


def test_search_dir_is_the_folder_of_the_interpreter_that_really_runs(tmp_path):
    real = tmp_path / "pyenv" / "bin" / "python3.11"
    real.parent.mkdir(parents=True)
    real.write_text("")
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    linked = VTuneConfig(vtune=VTUNE, target=(str(link), "s.autoitt.pyc"),
                         copy=Path("/r/c.py"), script=Path("/s/s.py"), results=Path("/r"))
    command = collect_command(linked, "hotspots")
    assert command[command.index("-search-dir") + 1] == str(real.parent)
    assert command[command.index("--") + 1] == str(link)  # the venv's python runs, so the venv's packages load


def test_a_copy_with_nothing_to_mark_is_collected_from_the_start():
    unpaused = VTuneConfig(vtune=VTUNE, target=TARGET, copy=Path("/runs/train-1/train_itt.py"),
                           script=Path("/src/train.py"), results=Path("/runs/train-1"), start_paused=False)
    assert collect_command(unpaused, "hotspots") == [arg for arg in HOTSPOTS if arg != "-start-paused"]


def test_report_command_asks_for_csv_with_an_explicit_delimiter_into_a_file():
    command = report_command(config(), Path("/runs/train-1/hotspots.0"), "hotspots", ("-group-by", "task"),
                             Path("/runs/train-1/csv/hotspots.0-tasks.csv"))
    assert command == [VTUNE, "-report", "hotspots", "-group-by", "task", "-result-dir", "/runs/train-1/hotspots.0",
                       "-format", "csv", "-csv-delimiter", "comma",
                       "-report-output", "/runs/train-1/csv/hotspots.0-tasks.csv", "-quiet",
                       "-search-dir", "/nonexistent/venv/bin",
                       "-source-search-dir", "/runs/train-1", "-source-search-dir", "/src"]


# -- the documented CSV shapes --------------------------------------------------------------------------------------

FUNCTIONS_CSV = textwrap.dedent(
    """\
    Function,CPU Time,Memory Bound(%),Memory Bound:L1 Bound(%),Loads,Stores,Module,Function (Full),Source File,Start Address
    "std::vector<int, std::allocator<int>>::push_back",12.5,31.2,,1200,800,libgraph.so,"std::vector<int, std::allocator<int>>::push_back(int const&)",stl_vector.h,0x4011f0
    busy,3.25,,,,,python3.11,busy,train_itt.py,0x1
    [Unknown stack frame(s)],0.5,,,,,,,,
    """
)


def test_hotspots_by_function_reads_quoted_names_with_commas_and_empty_cells():
    rows = parse_functions(FUNCTIONS_CSV)
    assert [r.function for r in rows] == ["std::vector<int, std::allocator<int>>::push_back", "busy",
                                          "[Unknown stack frame(s)]"]
    first = rows[0]
    assert first.cpu_time_s == 12.5 and first.module == "libgraph.so" and first.source_file == "stl_vector.h"
    assert first.full_name == "std::vector<int, std::allocator<int>>::push_back(int const&)"
    assert first.columns["Memory Bound:L1 Bound(%)"] is None and first.columns["Memory Bound(%)"] == 31.2
    assert rows[2].module is None and rows[2].source_file is None and rows[2].source_line is None


def test_task_grouping_skips_the_column_filter_line_and_reads_semicolons():
    text = "Column filter is ON.\nTask Type;CPU Time\nconvolution;1451.459338\n[Outside any task];280.489764\n"
    rows = parse_tasks(text, delimiter=";")
    assert [(r.task, r.cpu_time_s) for r in rows] == [("convolution", 1451.459338), ("[Outside any task]", 280.489764)]


def test_task_grouping_accepts_the_self_suffix_of_column_listings():
    rows = parse_tasks("Task Type,CPU Time:Self\nstep,2.5\n")
    assert rows[0].cpu_time_s == 2.5


UARCH_TASKS_CSV = textwrap.dedent(
    """\
    Task Type,Clockticks,CPI Rate,Retiring(%),Front-End Bound(%),Bad Speculation(%),Back-End Bound(%),Back-End Bound:Memory Bound(%),Back-End Bound:Memory Bound:L1 Bound(%)
    step,24000000000,0.77,20.0,45.5,4.5,30.0,18.0,7.2
    [Outside any task],1200000,,25.0,25.0,10.0,40.0,24.0,
    """
)


def test_uarch_task_grouping_gives_top_down_per_task():
    step, outside = parse_tasks(UARCH_TASKS_CSV)
    assert step.top_down == {"Retiring": 20.0, "Front-End Bound": 45.5, "Bad Speculation": 4.5,
                             "Back-End Bound": 30.0}
    assert max(step.top_down, key=step.top_down.get) == "Front-End Bound"
    assert step.columns["Back-End Bound:Memory Bound:L1 Bound(%)"] == 7.2
    assert step.cpu_time_s is None  # no CPU Time column in this report
    assert outside.columns["CPI Rate"] is None and outside.columns["Back-End Bound:Memory Bound:L1 Bound(%)"] is None


SUMMARY_CSV = textwrap.dedent(
    """\
    Hierarchy Level,Metric Name,Metric Value
    0,Elapsed Time,149.771137
    0,CPI Rate,0.665470
    1,MUX Reliability,N/A with HT on
    0,Back-End Bound,41.5
    1,Memory Bound,30.1
    2,L1 Bound,12.0
    2,DRAM Bound,
    3,Memory Bandwidth,4.2
    0,Front-End Bound,20.0
    0,Top Tasks,,Task Type,CPU Time
    x,,,step,12.0
    0,Paused Time,9.5
    """
)


def test_summary_is_keyed_on_metric_names_with_hierarchy_paths_and_text_values():
    metrics = parse_summary(SUMMARY_CSV)
    assert metric(metrics, "Elapsed Time") == 149.771137
    assert metric(metrics, "MUX Reliability") == "N/A with HT on"
    assert metric(metrics, "DRAM Bound") is None
    assert metric(metrics, "Back-End Bound:Memory Bound:L1 Bound") == 12.0
    assert [m.path for m in metrics if m.level == 3] == ["Back-End Bound:Memory Bound:DRAM Bound:Memory Bandwidth"]
    assert metric(metrics, "Paused Time") == 9.5  # after an inline nested table
    assert "step" not in {m.name for m in metrics}


def test_a_result_reads_elapsed_top_down_and_bandwidth_from_its_summary(tmp_path):
    (tmp_path / "s.csv").write_text(SUMMARY_CSV)
    report = read_result("uarch", None, {"summary": tmp_path / "s.csv"})
    assert report.elapsed_s == 149.771137 and report.paused_s == 9.5
    assert report.top_down == {"Front-End Bound": 20.0, "Back-End Bound": 41.5}
    assert report.bandwidth == {"Memory Bandwidth": 4.2}


def test_a_report_without_its_header_is_an_error_and_a_result_notes_it(tmp_path):
    with pytest.raises(ReportFormatError):
        parse_tasks("vtune: Error: something\n")
    (tmp_path / "t.csv").write_text("vtune: Error: something\n")
    report = read_result("hotspots", None, {"tasks": tmp_path / "t.csv", "summary": tmp_path / "missing.csv"})
    assert report.tasks == [] and len(report.problems) == 2


def test_vtune_error_lines_are_picked_out_of_mixed_output():
    output = ("epoch 1 loss 0.3\nvtune: Using result path `/r/hotspots'\r\n"
              "vtune: Error: This analysis requires one of these actions: a) Install Intel Sampling Drivers.\n"
              "print('vtune: Error: inside a string')\n"
              "vtune: Fatal error: The specified result directory already contains result data.\n"
              "vtune: Error: This analysis requires one of these actions: a) Install Intel Sampling Drivers.\n")
    assert error_lines(output) == [
        "vtune: Error: This analysis requires one of these actions: a) Install Intel Sampling Drivers.",
        "vtune: Fatal error: The specified result directory already contains result data.",
    ]


def test_hints_name_what_to_change_for_each_documented_failure():
    driver = hints(["vtune: Error: This analysis requires one of these actions: a) Install Intel Sampling Drivers. "
                    "b) ... set /proc/sys/kernel/perf_event_paranoid to 1"], VTUNE, "uarch")
    assert any("perf_event_paranoid" in h and "--sampling-mode sw" in h for h in driver)
    assert any("vtune-self-checker.sh" in h for h in driver)
    ptrace = hints(["vtune: Error: Cannot start data collection because the scope of ptrace system call is limited."],
                   VTUNE, "hotspots")
    assert any("ptrace_scope" in h for h in ptrace) and not any("perf_event_paranoid" in h for h in ptrace)


# -- per-rank result folders -----------------------------------------------------------------------------------------

def test_per_rank_and_per_host_result_folders_are_all_found_in_rank_order(tmp_path):
    for name in ("hotspots", "hotspots.10", "hotspots.2", "hotspots.0", "hotspots.node-a", "hotspots-old", "uarch.0"):
        (tmp_path / name).mkdir()
    (tmp_path / "hotspots.csv").write_text("")
    assert [p.name for p in result_dirs(tmp_path / "hotspots")] == [
        "hotspots", "hotspots.0", "hotspots.2", "hotspots.10", "hotspots.node-a"]
    assert [p.name for p in result_dirs(tmp_path / "uarch")] == ["uarch.0"]
    assert result_dirs(tmp_path / "missing" / "hotspots") == []


# -- the copy's lines shown as the original's ------------------------------------------------------------------------

def test_functions_in_the_copy_are_shown_at_the_original_scripts_lines(tmp_path):
    """Rows VTune reports on the copy go through the copy's exact line map (instrumentation.json)."""
    original = ("import sys\n\n\ndef busy(n):\n    return n\n\n\n"
                "for step in range(3):\n    busy(step)\n    loss.backward()\n")
    script, folder = tmp_path / "train.py", tmp_path / "out"
    script.write_text(original)
    folder.mkdir()
    instrumentation, _ = prepare(load_project(script, Mode()), folder)
    copy_lines = [line.strip() for line in Path(instrumentation.entry.runs).read_text().splitlines()]
    to_original = source_mapper(instrumentation, [])

    def row(function, source, line=None):
        return FunctionRow(function, 1.0, "python3.11", function, source, line, {})

    by_definition = to_original(row("busy", "/elsewhere/out/train_itt.py"))
    assert (by_definition.source_file, by_definition.source_line) == (str(script), 4)
    by_line = to_original(row("<module>", "train_itt.py", copy_lines.index("busy(step)") + 1))
    assert (by_line.source_file, by_line.source_line) == (str(script), 9)
    marker = to_original(row("<module>", "train_itt.py", copy_lines.index('itt.task_begin(_autoitt_domain, "step")') + 1))
    assert marker.source_line == 8  # an inserted line shows as the line of the loop it marks
    for other in (row("push_back", "stl_vector.h", 40), row("busy", str(script), 4)):
        assert to_original(other) == other
    assert to_original(row("busy", str(script.resolve()), 4)).source_file == str(script)  # as the user named it


# -- the launcher's exit code file ---------------------------------------------------------------------------------

@pytest.mark.parametrize("body, code", [("print('ok')", 0), ("import sys; sys.exit(7)", 7),
                                        ("raise RuntimeError('diverged')", 1), ("import sys; sys.exit('bye')", 1),
                                        ("raise KeyboardInterrupt", 130)])
def test_the_launcher_records_the_scripts_exit_code_per_process(tmp_path, body, code):
    """Run as autoitt runs it (the .pyc, in launch.environment), with AUTOITT_EXIT_DIR as VTune's backend sets it."""
    from instrumenter import launch
    from instrumenter.cli.profiling import prepare
    from instrumenter.sources.project import load_project
    from transforms import Mode

    script, folder = tmp_path / "s.py", tmp_path / "out"
    script.write_text(body + "\nimport os; print('env', os.environ.get('AUTOITT_EXIT_DIR'))\n")
    folder.mkdir()
    prepare(load_project(script, Mode(launched=True)), folder)
    env = launch.environment(os.environ, script, folder / "instrumentation.json")
    env[EXIT_DIR_VARIABLE] = str(tmp_path / "exit")
    done = subprocess.run(launch.command(script, [], folder / "instrumentation.json"), env=env,
                          capture_output=True, text=True)
    assert done.returncode == (-2 if code == 130 else code)  # Ctrl-C still ends the process by SIGINT
    written = list((tmp_path / "exit").iterdir())
    assert len(written) == 1 and written[0].read_text().strip() == str(code)
    if code == 0:
        assert "env None" in done.stdout  # the script's environment is as without autoitt


# -- the stand-in's grammar ----------------------------------------------------------------------------------------

def standin(*args, cwd=None, env=None):
    environment = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(STANDIN / "vtune"), *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [
    ["-collect", "hotspots", "-bogus", "--", "true"],
    ["-collect", "hotspots", "-knob", "collect-memory-bandwidth=true", "--", "true"],
    ["-collect", "hotspots", "-knob", "sampling-mode=fast", "--", "true"],
    ["-collect", "uarch-exploration", "-knob", "sampling-mode=sw", "--", "true"],
    ["-collect", "hotspots", "-data-limit", "-5", "--", "true"],
    ["-collect", "hotspots", "-group-by", "task", "--", "true"],
    ["-report", "hotspots", "-r", "x", "-format", "csv"],
    ["-report", "hotspots", "-r", "x", "-knob", "sampling-mode=sw"],
    ["-collect", "hotspots", "-report", "summary"],
])
def test_the_standin_rejects_what_vtune_documents_as_invalid(tmp_path, args):
    done = standin(*args, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.startswith("vtune: Error:"), done.stderr
    assert not any(tmp_path.iterdir())


def test_the_standin_refuses_a_result_folder_that_holds_a_result(tmp_path):
    first = standin("-collect", "hotspots", "-r", "res", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = standin("-collect", "hotspots", "-r", "res", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert again.returncode != 0
    assert "vtune: Fatal error: The specified result directory already contains result data." in again.stderr


def test_the_standin_returns_its_own_code_unless_asked_for_the_apps(tmp_path):
    failing = [sys.executable, "-c", "raise SystemExit(5)"]
    assert standin("-collect", "hotspots", "-r", "a", "--", *failing, cwd=tmp_path).returncode == 0
    assert standin("-collect", "hotspots", "-r", "b", "-return-app-exitcode", "--", *failing,
                   cwd=tmp_path).returncode == 5


def test_the_standin_answers_with_the_column_filter_preamble_and_the_delimiter_asked(tmp_path):
    assert standin("-collect", "hotspots", "-r", "res", "--", sys.executable, "-c", "pass", cwd=tmp_path).returncode == 0
    done = standin("-report", "hotspots", "-q", "-format", "csv", "-csv-delimiter", "semicolon", "-group-by", "task",
                   "-column", "CPU Time:Self", "-r", "res", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["Column filter is ON.", "Task Type;CPU Time"]
    assert parse_tasks(done.stdout, ";")[-1].task == "[Outside any task]"


# -- end to end, against the stand-in --------------------------------------------------------------------------------

TINY = textwrap.dedent(
    """\
    import sys


    class Optimizer:
        def step(self):
            pass


    def busy(n):
        total = 0
        for i in range(n):
            total += i * i
        return total


    def main():
        optimizer = Optimizer()
        for step in range(3):
            busy(300000)
            optimizer.step()
        if len(sys.argv) > 1 and sys.argv[1] == "fail":
            sys.exit(7)
        print("trained")


    if __name__ == "__main__":
        main()
    """
)
BUSY_LINE = 9  # `def busy(n):` in TINY


def autoitt(*args, cwd, env=None):
    """Run autoitt with the stand-in first on PATH, then this interpreter's folder (the stand-in runs on it)."""
    path = os.pathsep.join([str(STANDIN), os.path.dirname(sys.executable), os.environ["PATH"]])
    return run_autoitt(*args, cwd=cwd, env={"PATH": path, **(env or {})})


def invocations(log: Path):
    return [json.loads(line) for line in log.read_text().splitlines()]


def collections(log: Path):
    return [entry["argv"][entry["argv"].index("-collect") + 1] for entry in invocations(log)
            if "-collect" in entry["argv"]]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tiny.py").write_text(TINY)
    log = folder / "standin.jsonl"
    done = autoitt("profile", "--json", "-r", "out", "tiny.py", cwd=folder, env={"AUTOITT_STANDIN_LOG": str(log)})
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(done.stdout), done, log


def test_auto_backend_runs_hotspots_then_uarch_each_read_back_before_the_next(tiny_run):
    folder, summary, done, log = tiny_run
    actions = [(entry["argv"][0], entry["argv"][1]) for entry in invocations(log)]
    assert actions == [("-collect", "hotspots"), ("-report", "summary"), ("-report", "hotspots"),
                       ("-report", "hotspots"), ("-collect", "uarch-exploration"), ("-report", "summary"),
                       ("-report", "hotspots")]
    assert [a["run"]["status"] for a in summary["vtune"]["analyses"]] == ["ok", "ok"]


def test_cpu_time_per_itt_task_includes_outside_any_task(tiny_run):
    _, summary, _, _ = tiny_run
    hotspots = summary["vtune"]["analyses"][0]["results"][0]
    tasks = {t["task"]: t["cpu_time_s"] for t in hotspots["tasks"]}
    assert {"step", "step_loop", "[Outside any task]"} <= set(tasks)
    assert tasks["step"] > 0


def test_uarch_gives_top_down_per_task(tiny_run):
    _, summary, _, _ = tiny_run
    uarch = summary["vtune"]["analyses"][1]["results"][0]
    step = next(t for t in uarch["tasks"] if t["task"] == "step")
    assert set(step["top_down"]) == {"Retiring", "Front-End Bound", "Bad Speculation", "Back-End Bound"}
    assert set(uarch["top_down"]) == set(step["top_down"]) and "Memory Bandwidth" in uarch["bandwidth"]


def test_functions_of_the_copy_are_shown_on_the_original_script(tiny_run):
    folder, summary, _, _ = tiny_run
    functions = summary["vtune"]["analyses"][0]["results"][0]["functions"]
    busy = next(f for f in functions if f["function"] == "busy")
    assert (busy["source_file"], busy["source_line"]) == ("tiny.py", BUSY_LINE)
    raw = (folder / "out" / "csv" / "hotspots-functions.csv").read_text()
    # The raw CSV keeps what VTune said: the launcher names the copy's code by the original's path and lines.
    assert str((folder / "tiny.py").resolve()) in raw and "tiny_itt.py" not in raw


def test_raw_csvs_logs_and_results_are_kept_in_the_result_folder(tiny_run):
    folder, _, _, _ = tiny_run
    out = folder / "out"
    assert {p.name for p in (out / "csv").iterdir()} == {
        "hotspots-summary.csv", "hotspots-tasks.csv", "hotspots-functions.csv", "uarch-summary.csv", "uarch-tasks.csv"}
    assert {"hotspots", "uarch", "vtune.json", "run.json", "summary.json", "vtune-hotspots.log",
            "vtune-uarch.log", "tiny_itt.py"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "run.json").read_text())["backend"] == "vtune"


def test_the_json_keeps_the_builtin_fields(tiny_run):
    _, summary, _, _ = tiny_run
    assert {"elapsed_s", "collected_s", "processes", "threads", "events", "tasks", "steps", "operators",
            "unfinished", "warnings", "vtune", "thread_time_s", "ranks", "stragglers", "trace_window",
            "run_split", "sampling", "hotspots", "hotspot_lines", "hotspots_by_task", "hotspots_outside",
            "hotspot_lines_outside", "counters", "counter_notes", "uncollected", "machine", "operator_sampling"} == set(summary)
    assert summary["sampling"] is None and summary["hotspots"] == []  # with VTune, VTune samples
    assert summary["elapsed_s"] > 0 and summary["collected_s"] > 0


def test_report_rebuilds_the_same_summary_from_the_saved_csvs_without_vtune(tiny_run):
    folder, summary, _, _ = tiny_run
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AUTOITT_")}
    environment["PATH"] = os.path.dirname(sys.executable) + ":/usr/bin:/bin"
    again = subprocess.run([sys.executable, "-m", "instrumenter", "report", "--json", "out"], cwd=folder,
                           env=environment, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == summary
    human = subprocess.run([sys.executable, "-m", "instrumenter", "report", "out"], cwd=folder, env=environment,
                           capture_output=True, text=True)
    assert "CPU time per task, hotspots" in human.stdout
    assert "Top-down per task, uarch" in human.stdout
    assert "tiny.py:9" in human.stdout
    assert "vtune-gui out/hotspots" in human.stdout and "vtune-gui out/uarch" in human.stdout


def test_a_report_with_no_elapsed_time_recorded_says_it_is_unknown_not_zero(tiny_run, tmp_path):
    """As after autoitt was killed: run.json and vtune.json never got the run's end, and VTune's summary
    (a stand-in's CSV, VTune's documented format) has no elapsed time."""
    folder, _, _, _ = tiny_run
    out = tmp_path / "out"
    shutil.copytree(folder / "out", out)
    record = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**record, "elapsed_s": 0.0, "exit_code": None}))
    runs = json.loads((out / "vtune.json").read_text())
    (out / "vtune.json").write_text(json.dumps(_without_elapsed(runs)))
    for summary_csv in (out / "csv").glob("*-summary.csv"):
        summary_csv.write_text("".join(line for line in summary_csv.read_text().splitlines(keepends=True)
                                       if "Elapsed Time" not in line))
    shown = autoitt("report", "--recompute", "out", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "elapsed unknown" in shown.stdout and "elapsed 0.0" not in shown.stdout
    assert json.loads(autoitt("report", "--json", "--recompute", "out", cwd=tmp_path).stdout)["elapsed_s"] is None


def _without_elapsed(value):
    """``value`` (vtune.json) with every ``elapsed_s`` 0, as a run that never ended leaves it."""
    if isinstance(value, dict):
        return {key: 0.0 if key == "elapsed_s" else _without_elapsed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_elapsed(item) for item in value]
    return value


@pytest.mark.slow
def test_a_failing_uarch_is_reported_with_vtunes_error_and_hotspots_still_summarized(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    done = autoitt("profile", "-r", "out", "tiny.py", cwd=tmp_path, env={"AUTOITT_STANDIN_FAIL": "uarch"})
    assert done.returncode == 2
    assert "vtune: Error: This analysis requires one of these actions: a) Install Intel Sampling Drivers." in done.stdout
    assert "perf_event_paranoid" in done.stdout and "vtune-self-checker.sh" in done.stdout
    assert "CPU time per task, hotspots" in done.stdout
    assert "VTune could not complete: uarch" in done.stderr
    assert "tiny.py exited with code" not in done.stderr
    assert not (tmp_path / "out" / "uarch").exists()


@pytest.mark.slow
def test_a_failing_script_is_reported_as_the_scripts_failure_and_uarch_is_not_run(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    log = tmp_path / "standin.jsonl"
    done = autoitt("profile", "-r", "out", "tiny.py", "fail", cwd=tmp_path, env={"AUTOITT_STANDIN_LOG": str(log)})
    assert done.returncode == 7
    assert "tiny.py exited with code 7" in done.stderr
    assert "VTune could not complete" not in done.stderr and "VTune failed" not in done.stdout
    assert collections(log) == ["hotspots"]
    assert "uarch: not run (the script failed under hotspots)" in done.stdout
    assert "CPU time per task, hotspots" in done.stdout  # what was collected before it failed


@pytest.mark.slow
def test_options_vtune_rejects_are_reported_as_vtune_failures(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    done = autoitt("profile", "--backend", "vtune", "--analysis", "hotspots", "--vtune-arg", "-no-such-option",
                   "-r", "out", "tiny.py", cwd=tmp_path)
    assert done.returncode == 2
    assert "vtune: Error: Unknown option '-no-such-option'." in done.stdout
    assert "VTune could not complete: hotspots" in done.stderr


@pytest.mark.slow
def test_options_chosen_on_the_command_line_reach_vtune(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    log = tmp_path / "standin.jsonl"
    done = autoitt("profile", "--analysis", "hotspots", "--sampling-mode", "hw", "--data-limit", "300",
                   "--vtune-arg", "-knob sampling-interval=5", "-r", "out", "tiny.py", cwd=tmp_path,
                   env={"AUTOITT_STANDIN_LOG": str(log)})
    assert done.returncode == 0, done.stderr[-3000:]
    argv = [e["argv"] for e in invocations(log) if "-collect" in e["argv"]]
    assert len(argv) == 1
    assert argv[0][:5] == ["-collect", "hotspots", "-start-paused", "-knob", "sampling-mode=hw"]
    assert argv[0][argv[0].index("-data-limit") + 1] == "300"
    assert argv[0][argv[0].index("--") - 2:argv[0].index("--")] == ["-knob", "sampling-interval=5"]


FAKE_MPIRUN = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    # A fake `mpirun -n N CMD...` for the tests: runs CMD once per rank, one after another, with PMI_RANK set.
    import os, subprocess, sys
    n = int(sys.argv[2])
    codes = [subprocess.call(sys.argv[3:], env={**os.environ, "PMI_RANK": str(rank)}) for rank in range(n)]
    sys.exit(max(codes))
    """
)


@pytest.mark.slow
def test_a_launcher_runs_vtune_per_rank_and_every_rank_folder_is_read_back(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(FAKE_MPIRUN)
    (bin_dir / "mpirun").chmod(0o755)
    done = autoitt("profile", "--json", "--analysis", "hotspots", "--launcher", f"{bin_dir / 'mpirun'} -n 2",
                   "-r", "out", "tiny.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)["vtune"]["analyses"][0]["results"]
    assert [(r["name"], r["rank"]) for r in results] == [("hotspots.0", "0"), ("hotspots.1", "1")]
    assert all(any(t["task"] == "step" for t in r["tasks"]) for r in results)
    assert len(list((tmp_path / "out" / "exit" / "hotspots").iterdir())) == 2  # one exit code per rank


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
def test_torchrun_runs_vtune_per_rank_and_every_rank_folder_is_read_back(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    done = autoitt("profile", "--json", "--analysis", "hotspots", "--launcher",
                   f"{torchrun} --standalone --nproc_per_node 2", "-r", "out", "tiny.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)["vtune"]["analyses"][0]["results"]
    assert [(r["name"], r["rank"]) for r in results] == [("hotspots.0", "0"), ("hotspots.1", "1")]
    assert all(any(t["task"] == "step" for t in r["tasks"]) for r in results)
    assert len(list((tmp_path / "out" / "exit" / "hotspots").iterdir())) == 2  # one exit code per rank


def test_torch_distributed_launch_without_use_env_cannot_run_vtune(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    done = autoitt("profile", "--backend", "vtune", "--launcher",
                   f"{sys.executable} -m torch.distributed.launch --nproc_per_node 2", "-r", "out", "tiny.py",
                   cwd=tmp_path)
    assert done.returncode == 2
    assert "--use-env" in done.stderr and not (tmp_path / "out").exists()


def test_vtune_options_with_the_builtin_backend_are_ignored_with_a_note(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    done = autoitt("profile", "--backend", "builtin", "--analysis", "uarch", "--sampling-mode", "hw",
                   "-r", "out", "tiny.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--analysis, --sampling-mode: VTune backend options, ignored with the built-in collector" in done.stderr
    assert "builtin backend" in done.stdout


def test_an_unknown_analysis_is_a_usage_error(tmp_path):
    done = autoitt("profile", "--analysis", "hotspots,memory", "tiny.py", cwd=tmp_path)
    assert done.returncode == 2
    assert "--analysis" in done.stderr and not (tmp_path / "autoitt-results").exists()


@pytest.mark.slow
def test_a_torch_training_shows_its_steps_and_operators_per_task(tmp_path):
    (tmp_path / "train.py").write_text(TORCH_TRAIN_SEEDED)
    done = autoitt("profile", "--json", "--backend", "vtune", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    analyses = json.loads(done.stdout)["vtune"]["analyses"]
    tasks = {t["task"] for t in analyses[0]["results"][0]["tasks"]}
    assert {"step", "aten::linear"} <= tasks
    assert any(t["task"] == "step" and t["top_down"] for t in analyses[1]["results"][0]["tasks"])


def test_two_vtune_runs_compare_by_cpu_time_per_task_with_no_step_time_to_test(tiny_run, tmp_path):
    """``autoitt compare`` of two VTune result folders (the stand-in's, from VTune's documented CLI: see the
    module's docstring): CPU time per ITT task and per function moved, and no step durations, said so."""
    folder, _, _, _ = tiny_run
    again = tmp_path / "again"
    shutil.copytree(folder / "out", again)
    done = run_autoitt("compare", str(folder / "out"), str(again), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["steps"] == [] and result["verdict"].startswith("no step loop to compare")
    assert any("VTune runs have CPU time per task" in note for note in result["unmatched"])
    assert "step" in {row["name"] for row in result["operators"]}
    assert result["run_split"]["elapsed_s"]["ratio"] == 1.0


def test_a_vtune_run_and_a_built_in_run_compare_their_wall_time_only(tiny_run, tmp_path):
    folder, _, _, _ = tiny_run
    (tmp_path / "tiny.py").write_text(TINY)
    built = run_autoitt("profile", "--backend", "builtin", "-r", "builtin", "tiny.py", cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    done = run_autoitt("compare", str(folder / "out"), str(tmp_path / "builtin"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert any("on the vtune backend, NEW on the builtin backend" in note for note in result["unmatched"])
    assert set(result["run_split"]) == {"elapsed_s", "collected_s"} and result["steps"] == []
