"""``autoitt compare BASE NEW``: two profiles compared, on real runs of the built-in collector (real torch).

Four profiles of one small training script are made once: BASE, BASE again unchanged (twice), and NEW with a
5 ms sleep added to its Dataset's ``__getitem__`` (one call per batch). The noise test's own behaviour is
specified on hand-made medians last.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from instrumenter.comparison import Interval, Medians, difference, median_interval
from tests.test_profile import autoitt

TRAIN = textwrap.dedent("""
    import os, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    SLEEP = float(os.environ.get("EXTRA_SLEEP", "0"))
    torch.set_num_threads(1)  # two OpenMP threads on two cores spin at their barriers when a core is busy

    class Batches(Dataset):
        def __len__(self):
            return 120

        def __getitem__(self, index):
            if SLEEP:
                time.sleep(SLEEP)
            g = torch.Generator().manual_seed(index)
            return torch.randn(64, 256, generator=g), torch.randint(0, 4, (64,), generator=g)

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Batches(), batch_size=None, shuffle=False)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    print("done")
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """BASE, BASE again, and NEW (5 ms more per batch): three result folders of the same script."""
    root = tmp_path_factory.mktemp("compare")
    script = root / "train.py"
    script.write_text(TRAIN)
    folders = {}
    for name, sleep in (("base", "0"), ("again", "0"), ("repeats/2", "0"), ("slow", "0.005"), ("slows/2", "0.005")):
        folders[name] = root / name
        done = autoitt("profile", "-r", str(folders[name]), str(script), cwd=root, env={"EXTRA_SLEEP": sleep})
        assert done.returncode == 0, done.stderr[-3000:]
    for side, first in (("repeats", "base"), ("slows", "slow")):  # a side of repeats: its first run, and one more
        folders[f"{side}/1"] = root / side / "1"
        shutil.copytree(folders[first], folders[f"{side}/1"])
    return folders


def compared(base: Path, new: Path, *options: str):
    done = autoitt("compare", str(base), str(new), "--json", *options)
    return done, json.loads(done.stdout) if done.stdout.strip() else None


def test_a_run_with_a_slower_data_step_compares_as_slower_beyond_noise(runs):
    done, result = compared(runs["base"], runs["slow"])
    assert done.returncode == 0, done.stderr
    assert result["slower"] is True
    assert result["verdict"].startswith("NEW is slower beyond noise")
    step = result["steps"][0]
    assert step["label"] == "step" and step["difference"] == "slower"


def test_the_sleep_shows_in_the_data_phase_at_about_5_ms_a_step(runs):
    _, result = compared(runs["base"], runs["slow"])
    data = result["steps"][0]["phases_s_per_step"]["data"]
    assert 0.004 <= data["delta"] <= 0.0075


def test_fail_if_slower_exits_1_when_new_is_slower_beyond_noise(runs):
    done, _ = compared(runs["base"], runs["slow"], "--fail-if-slower", "5")
    assert done.returncode == 1
    assert "slower than BASE by more than 5 %" in done.stderr


def test_two_runs_of_the_unchanged_script_compare_within_noise_and_exit_0(runs):
    done, result = compared(runs["base"], runs["again"], "--fail-if-slower", "5")
    assert done.returncode == 0, done.stderr
    assert result["steps"][0]["difference"] == "within noise"
    assert result["slower"] is False


def test_a_faster_new_run_compares_as_faster_and_passes_the_gate(runs):
    done, result = compared(runs["slow"], runs["base"], "--fail-if-slower", "5")
    assert done.returncode == 0
    assert result["steps"][0]["difference"] == "faster"


def test_the_terminal_comparison_says_the_verdict_first_and_shows_the_phases(runs):
    done = autoitt("compare", str(runs["base"]), str(runs["slow"]))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"autoitt compare of {runs['base'].parent / 'train.py'}")
    assert lines[1].startswith("NEW is slower beyond noise: 'step' steady iteration median")
    assert "Phases of step, per step" in done.stdout and "data" in done.stdout


def test_the_json_names_both_runs_and_how_the_difference_was_decided(runs):
    _, result = compared(runs["base"], runs["again"])
    assert result["base"]["folder"] == str(runs["base"]) and result["new"]["script"].endswith("train.py")
    step = result["steps"][0]
    assert step["decided_on"] == "iteration"
    iteration = step["iteration"]
    assert iteration["decided"].startswith("one run a side: the medians' 99% intervals disjoint and at least 30% apart")
    low, high = iteration["base_runs"][0]["interval_s"]
    assert low <= iteration["median_s"]["base"] <= high
    assert {"steps", "operators", "hotspots", "lines", "counters", "run_split", "unmatched"} <= set(result)


def test_operators_are_compared_per_step_the_biggest_movers_first(runs):
    _, result = compared(runs["base"], runs["again"])
    rows = result["operators"]
    assert 0 < len(rows) <= 12

    def figure(row, side):
        return row[side] if row[side] is not None else row[f"{side}_at_most"] or 0.0

    moved = [abs(figure(row, "new") - figure(row, "base")) for row in rows]
    assert moved == sorted(moved, reverse=True)
    changed = [row for row in rows if row["status"] == "changed"]
    assert changed and all(0 < row["base"] < 0.005 and row["where"] == "PyTorch" for row in changed)


def test_a_line_that_waits_more_moves_most_of_your_code_by_its_cpu_and_waiting_time(runs):
    """NEW's sleep is 5 ms a batch off the CPU: by CPU time alone, sampling noise in other lines outranked it."""
    _, result = compared(runs["base"], runs["slow"])
    sleep = next(n for n, line in enumerate(TRAIN.splitlines(), 1) if "time.sleep(SLEEP)" in line)
    first = result["lines"][0]
    assert first["name"].endswith(f"train.py:{sleep}"), result["lines"][:3]
    assert 0.003 <= first["new"] - (first["base"] or 0.0) <= 0.0075


def test_a_folder_that_is_not_a_result_folder_is_an_input_error(runs, tmp_path):
    done, _ = compared(tmp_path, runs["base"])
    assert done.returncode == 2
    assert str(tmp_path) in done.stderr


def test_a_folder_of_result_folders_is_a_side_of_repeats_tested_by_their_spread(runs):
    done, result = compared(runs["base"].parent / "repeats", runs["base"].parent / "slows")
    assert done.returncode == 0, done.stderr
    assert result["base"]["runs"] == [str(runs["repeats/1"]), str(runs["repeats/2"])]
    step = result["steps"][0]
    assert len(step["iteration"]["base_runs"]) == 2 and len(step["iteration"]["new_runs"]) == 2
    assert step["iteration"]["decided"].startswith("2 run(s) against 2: Student's t")
    assert step["difference"] == "slower"


def test_two_runs_against_one_know_too_little_of_the_spread_to_call_even_a_large_difference():
    # (one degree of freedom: Student's t at 99 % is 63.7, so the runs' spread is all but unknown)
    base = Medians((0.00100, 0.00107), (None, None))
    new = Medians((0.0060,), (None,))
    assert difference(base, new).difference == "within noise"


def test_repeats_of_different_scripts_are_an_input_error(runs, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(runs["base"], mixed / "a")
    record = json.loads((runs["base"] / "run.json").read_text())
    record["script"] = str(tmp_path / "other.py")
    (mixed / "b").mkdir()
    for item in runs["base"].iterdir():
        if item.is_file():
            shutil.copy(item, mixed / "b" / item.name)
    (mixed / "b" / "run.json").write_text(json.dumps(record))
    done, _ = compared(mixed, runs["slow"])
    assert done.returncode == 2
    assert "repeats of one side" in done.stderr


def test_a_summary_without_step_histograms_leaves_the_noise_unknown(runs, tmp_path):
    # (a summary.json of an autoitt before the histograms were kept: the figures compare, the test cannot)
    old = tmp_path / "old"
    shutil.copytree(runs["base"], old)
    summary = json.loads((old / "summary.json").read_text())
    for step in summary["steps"]:
        del step["steady_histogram"], step["steady_iteration_histogram"], step["steady_iteration_median_s"]
    (old / "summary.json").write_text(json.dumps(summary))
    done, result = compared(old, runs["slow"], "--fail-if-slower", "5")
    assert done.returncode == 0
    assert result["steps"][0]["difference"] == "unknown"
    assert any("--recompute" in note and str(old) in note for note in result["unmatched"])


# -- the conditions: the same program, machines alike ------------------------------------------------------

def edited(folder: Path, to: Path, **record) -> Path:
    """A copy of result folder ``folder`` whose run.json has ``record``'s fields instead."""
    shutil.copytree(folder, to)
    found = json.loads((to / "run.json").read_text())
    found.update(record)
    (to / "run.json").write_text(json.dumps(found))
    return to


def machine(other_cores: float, run_cores: float = 1.0, cpus: float = 2.0, **more) -> dict:
    return {"cpus": cpus, "run_cpu_s": 10 * run_cores, "other_cpu_s": 10 * other_cores, "elapsed_s": 10.0, **more}


def test_two_different_scripts_get_no_verdict_and_the_summary_says_why(runs, tmp_path):
    other = edited(runs["slow"], tmp_path / "other", script=str(tmp_path / "other.py"))
    done, result = compared(runs["base"], other, "--fail-if-slower", "5")
    assert done.returncode == 0 and result["slower"] is False
    assert result["steps"][0]["difference"] == "inconclusive"
    assert "different scripts" in result["verdict"] and "other.py" in result["verdict"]
    terminal = autoitt("compare", str(runs["base"]), str(other)).stdout
    assert "of two scripts, BASE" in terminal


def test_the_same_script_with_other_arguments_gets_no_verdict(runs, tmp_path):
    other = edited(runs["slow"], tmp_path / "other", args=["--epochs", "9"])
    _, result = compared(runs["base"], other)
    assert result["steps"][0]["difference"] == "inconclusive" and "arguments" in result["verdict"]


def test_a_slower_run_on_an_oversubscribed_machine_is_inconclusive_and_says_why(runs, tmp_path):
    quiet = edited(runs["base"], tmp_path / "quiet", machine=machine(0.1))
    loaded = edited(runs["slow"], tmp_path / "loaded", machine=machine(1.5))
    done, result = compared(quiet, loaded, "--fail-if-slower", "5")
    assert done.returncode == 0 and result["slower"] is False
    step = result["steps"][0]
    assert step["difference"] == "inconclusive"
    assert ("NEW's machine had more threads wanting a core than cores (other work kept 1.50 of 2 cores busy; "
            "the other's: other work kept 0.10 of 2 cores busy)") in result["verdict"]
    assert "the noise test alone: slower" in step[step["decided_on"]]["decided"]
    assert result["conditions"]["new"]["other_cores"] == pytest.approx(1.5)


def test_a_slower_run_that_left_cores_idle_is_slower_whatever_else_ran(runs, tmp_path):
    # a run that mostly waits (0.2 cores) beside 1.5 cores of other work: the machine had a core to spare
    quiet = edited(runs["base"], tmp_path / "quiet", machine=machine(0.1))
    loaded = edited(runs["slow"], tmp_path / "loaded", machine=machine(1.5, run_cores=0.2))
    _, result = compared(quiet, loaded)
    assert result["steps"][0]["difference"] == "slower"
    assert any("NEW's: other work kept 1.50 of 2 cores busy" in note for note in result["unmatched"])


def test_a_faster_run_whose_base_was_oversubscribed_is_inconclusive(runs, tmp_path):
    loaded = edited(runs["slow"], tmp_path / "loaded", machine=machine(1.5))
    quiet = edited(runs["base"], tmp_path / "quiet", machine=machine(0.0))
    _, result = compared(loaded, quiet)
    assert result["steps"][0]["difference"] == "inconclusive" and "BASE's machine had more threads" in result["verdict"]


def test_the_run_queue_tells_a_full_machine_where_the_cores_busy_cannot(runs, tmp_path):
    # other work's CPU time stops at the cores the run left it: 0.9 either side; the run queue says 1.0 and 3.5
    quiet = edited(runs["base"], tmp_path / "quiet", machine=machine(0.9, run_queue=1.9))
    loaded = edited(runs["slow"], tmp_path / "loaded", machine=machine(0.9, run_queue=3.5))
    _, result = compared(quiet, loaded)
    assert result["steps"][0]["difference"] == "inconclusive" and "3.5 threads runnable" in result["verdict"]


def test_a_slower_run_that_shared_an_equally_busy_machine_is_slower(runs, tmp_path):
    a = edited(runs["base"], tmp_path / "a", machine=machine(1.0, run_queue=3.0))
    b = edited(runs["slow"], tmp_path / "b", machine=machine(1.0, run_queue=3.0))
    _, result = compared(a, b)
    assert result["steps"][0]["difference"] == "slower"


def test_a_run_that_waits_more_leaves_cores_to_others_and_is_not_excused_by_them(runs, tmp_path):
    # the sleeping run used 0.2 cores, so other work got 1.7 where it got 1.0: it did not want more
    a = edited(runs["base"], tmp_path / "a", machine=machine(1.0, run_cores=1.0, run_queue=3.0))
    b = edited(runs["slow"], tmp_path / "b", machine=machine(1.7, run_cores=0.2, run_queue=2.4))
    _, result = compared(a, b)
    assert result["steps"][0]["difference"] == "slower"


def test_a_slower_run_on_slower_clocked_cpus_is_inconclusive(runs, tmp_path):
    fast = edited(runs["base"], tmp_path / "fast", machine=machine(0.0, mhz=3000.0))
    slow = edited(runs["slow"], tmp_path / "slow", machine=machine(0.0, mhz=2000.0))
    _, result = compared(fast, slow)
    assert result["steps"][0]["difference"] == "inconclusive"
    assert "NEW's CPUs ran at 2000 MHz, the other's at 3000" in result["verdict"]


@pytest.mark.slow
def test_an_unchanged_run_beside_other_work_is_not_called_slower(runs, tmp_path):
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        done = autoitt("profile", "-r", str(tmp_path / "loaded"), str(runs["base"].parent / "train.py"),
                       cwd=runs["base"].parent)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    _, result = compared(runs["base"], tmp_path / "loaded", "--fail-if-slower", "5")
    loaded = result["conditions"]["new"]
    assert loaded["run_queue"] > loaded["cpus"], f"the load did not take: {loaded}"
    assert result["steps"][0]["difference"] != "slower", result["verdict"]


# -- the noise test, on hand-made histograms and medians -----------------------------------------------------

def steps_at(milliseconds: float, count: int, spread: int = 0):
    """A histogram of ``count`` steps around ``milliseconds``, spread evenly over ``spread`` 1 % buckets each side."""
    return [(milliseconds / 1e3 * 1.01 ** k, count // (2 * spread + 1)) for k in range(-spread, spread + 1)]


def one_run(median_ms: float, low_ms: float, high_ms: float) -> Medians:
    return Medians((median_ms / 1e3,), (Interval(low_ms / 1e3, high_ms / 1e3, 1000),))


def test_the_median_interval_of_steps_in_one_bucket_is_that_bucket():
    assert median_interval([(0.001, 100)], 1.01) == Interval(0.001, 0.00101, 100)


def test_the_median_interval_narrows_as_steps_grow():
    few = median_interval(steps_at(1, 21, 10), 1.01)
    many = median_interval(steps_at(1, 21000, 10), 1.01)
    assert few.high_s - few.low_s > many.high_s - many.low_s


def test_too_few_steps_give_no_interval():
    assert median_interval([(0.001, 7)], 1.01) is None


def test_one_run_a_side_disjoint_and_more_than_30_percent_apart_is_slower_or_faster():
    base, new = one_run(1.0, 0.99, 1.01), one_run(1.4, 1.39, 1.41)
    assert difference(base, new).difference == "slower"
    assert difference(new, base).difference == "faster"


def test_one_run_a_side_disjoint_but_closer_than_the_threshold_is_within_noise():
    base, new = one_run(1.0, 0.99, 1.01), one_run(1.2, 1.19, 1.21)
    assert difference(base, new).difference == "within noise"
    assert difference(base, new, threshold=0.1).difference == "slower"


def test_one_run_a_side_with_overlapping_intervals_is_within_noise_however_far_the_medians():
    base, new = one_run(1.0, 0.5, 2.0), one_run(1.5, 0.9, 2.2)
    assert difference(base, new).difference == "within noise"


def test_one_run_without_an_interval_is_unknown():
    base = Medians((0.001,), (None,))
    assert difference(base, one_run(2.0, 1.9, 2.1)).difference == "unknown"


def test_repeats_that_spread_little_make_a_small_difference_beyond_noise():
    base = Medians((0.00100, 0.00101, 0.00099), (None,) * 3)
    new = Medians((0.00105, 0.00106, 0.00104), (None,) * 3)
    verdict = difference(base, new)
    assert verdict.difference == "slower" and verdict.how.startswith("3 run(s) against 3")


def test_repeats_that_spread_as_much_as_they_moved_are_within_noise():
    base = Medians((0.00090, 0.00110, 0.00100), (None,) * 3)
    new = Medians((0.00095, 0.00120, 0.00105), (None,) * 3)
    assert difference(base, new).difference == "within noise"


def test_repeats_beyond_their_spread_but_within_the_2_percent_floor_are_within_noise():
    base = Medians((0.001000, 0.001001, 0.000999), (None,) * 3)
    new = Medians((0.001010, 0.001011, 0.001009), (None,) * 3)
    assert difference(base, new).difference == "within noise"


def test_html_writes_the_comparison_as_a_page_that_opens_clean_in_chromium(runs, tmp_path):
    from tests.test_report_html import browse, status

    out = tmp_path / "compare.html"
    done = autoitt("compare", str(runs["base"]), str(runs["slow"]), "--html", str(out))
    assert done.returncode == 0, done.stderr
    assert f"comparison page written: {out}" in done.stderr
    text = out.read_text()
    assert "NEW is slower beyond noise" in text and "Phases of step, per step" in text
    said = status(browse(out, "--dump-dom").stdout)
    assert (said["data-errors"], said["data-blocked"]) == ("0", "0")


def test_html_into_a_folder_that_does_not_exist_is_an_input_error(runs, tmp_path):
    done = autoitt("compare", str(runs["base"]), str(runs["again"]), "--html", str(tmp_path / "no" / "c.html"))
    assert done.returncode == 2 and "cannot write the comparison page" in done.stderr


def test_a_movers_delta_is_a_bound_only_where_a_table_lacks_the_entry():
    from rich.console import Console

    from instrumenter.comparison import Change, Mover
    from instrumenter.comparison._render import _movers

    console = Console(record=True, width=120, highlight=False)
    _movers(console, "t", [Mover("new_op", "PyTorch", Change(None, 0.002)),
                           Mover("entered_op", "PyTorch", Change(None, 0.003), base_at_most=0.001)])
    text = console.export_text()
    new_row = next(line for line in text.splitlines() if "new_op" in line)
    entered_row = next(line for line in text.splitlines() if "entered_op" in line)
    assert "+2.00 ms" in new_row and "≥" not in new_row
    assert "≥ +2.00 ms" in entered_row
