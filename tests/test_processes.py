"""Every process of a profiled run runs instrumented code and is recorded: multiprocessing children with any
start method, torch.multiprocessing.spawn, process pools, the ranks a launcher starts.

Real torch multiprocessing on a tiny model, the real built-in collector.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.test_profile import autoitt

pytestmark = pytest.mark.slow

TRAINER = textwrap.dedent(
    """\
    import torch


    def train(model, steps):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(steps):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()
        return steps
    """
)

SPAWN_ENTRY_LOOPS = textwrap.dedent(
    """\
    import torch
    import torch.multiprocessing as mp


    def worker(rank, world):
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(5):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
        print("spawned and joined")
    """
)

PROCESSES_MODULE_LOOPS = textwrap.dedent(
    """\
    import sys

    import torch
    import torch.multiprocessing as mp

    from trainer import train

    if __name__ == "__main__":
        context = mp.get_context(sys.argv[1])
        model = torch.nn.Linear(4, 1)
        model.share_memory()
        workers = [context.Process(target=train, args=(model, 4)) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        print("exit codes", [worker.exitcode for worker in workers])
    """
)

POOL = textwrap.dedent(
    """\
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import torch

    from trainer import train


    def job(steps):
        return train(torch.nn.Linear(4, 1), steps)


    if __name__ == "__main__":
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            print(list(pool.map(job, [3, 3])))
    """
)


def _profile(folder, script: str, *args: str, **files: str):
    for name, text in {"trainer": TRAINER, **files}.items():
        (folder / f"{name}.py").write_text(text)
    (folder / "train.py").write_text(script)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "train.py", *args, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


def _steps(summary):
    return [(s["label"], s["count"]) for s in summary["steps"]]


def test_torch_multiprocessing_spawn_with_the_loops_in_the_script(tmp_path):
    summary, stderr = _profile(tmp_path, SPAWN_ENTRY_LOOPS)
    assert _steps(summary) == [("step", 10)]
    assert summary["processes"] >= 2
    assert "spawned and joined" in stderr


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_processes_training_in_an_imported_module_with_any_start_method(tmp_path, method):
    summary, stderr = _profile(tmp_path, PROCESSES_MODULE_LOOPS, method)
    assert _steps(summary) == [("train.step", 8)] or _steps(summary) == [("step", 8)]
    assert "exit codes [0, 0]" in stderr


def test_a_process_pool(tmp_path):
    summary, _ = _profile(tmp_path, POOL)
    assert sum(count for _, count in _steps(summary)) == 6


def test_a_subprocess_running_another_script_is_left_as_it_is(tmp_path):
    other = "from trainer import train\nimport torch\nprint('other', train(torch.nn.Linear(4, 1), 3))\n"
    script = textwrap.dedent(
        """\
        import subprocess, sys

        import torch

        from trainer import train

        train(torch.nn.Linear(4, 1), 2)
        print(subprocess.run([sys.executable, "other.py"], capture_output=True, text=True).stdout)
        """)
    summary, stderr = _profile(tmp_path, script, other=other)
    assert "other 3" in stderr
    assert sum(count for _, count in _steps(summary)) == 2  # the other script's 3 steps are not marked


def test_the_users_own_sitecustomize_still_runs_in_the_children(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    script = SPAWN_ENTRY_LOOPS.replace('print("spawned and joined")', "pass").replace(
        "def worker(rank, world):\n", "def worker(rank, world):\n    import os\n    print('site', os.environ.get('USER_SITE_RAN'))\n")
    (tmp_path / "train.py").write_text(script)
    (tmp_path / "trainer.py").write_text(TRAINER)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "train.py", cwd=tmp_path,
                   env={"PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("site yes") == 2
    assert _steps(json.loads(done.stdout)) == [("step", 10)]


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
def test_torchrun_ranks_with_the_builtin_collector(tmp_path):
    script = textwrap.dedent(
        """\
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(4):
            loss = model(torch.ones(4)).sum()
            loss.backward()
            optimizer.step()
        print("rank", dist.get_rank(), "done")
        dist.destroy_process_group()
        """)
    (tmp_path / "train.py").write_text(script)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out",
                   "--launcher", f"{torchrun} --standalone --nproc_per_node 2", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert _steps(summary) == [("step", 8)]
    assert [(rank["rank"], [(s["label"], s["count"]) for s in rank["steps"]]) for rank in summary["ranks"]] == [
        (0, [("step", 4)]), (1, [("step", 4)])]
    assert [(late["label"], late["steps"], late["ranks"]) for late in summary["stragglers"]] == [("step", 4, [0, 1])]
    trace = json.loads((tmp_path / "out" / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"].split(" (")[0] for e in trace if e["name"] == "process_name"}
    assert {"rank 0", "rank 1"} <= names


def test_the_children_environment_names_autoitts_site_folder_only_while_profiled(tmp_path):
    """A child started with a clean environment (env -i, python -I) simply runs as it is."""
    script = "import subprocess, sys\nprint(subprocess.run([sys.executable, '-I', '-c', 'print(42)'], " \
             "capture_output=True, text=True).stdout)\n"
    (tmp_path / "train.py").write_text(script)
    done = subprocess.run([sys.executable, "-m", "instrumenter", "profile", "--backend", "builtin", "-r", "out",
                           "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "42" in done.stdout


def test_an_mpirun_style_launcher_with_the_builtin_collector(tmp_path):
    """A stand-in mpirun (tests/test_vtune.FAKE_MPIRUN: one process per rank, PMI_RANK set), as MPICH's would."""
    from tests.test_vtune import FAKE_MPIRUN

    mpirun = tmp_path / "mpirun"
    mpirun.write_text(FAKE_MPIRUN)
    mpirun.chmod(0o755)
    (tmp_path / "train.py").write_text(TRAINER + "\nimport torch\ntrain(torch.nn.Linear(4, 1), 3)\n")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "--launcher", f"{mpirun} -n 2",
                   "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert [(rank["rank"], rank["steps"][0]["count"]) for rank in summary["ranks"]] == [(0, 3), (1, 3)]
    assert "--launcher" not in done.stderr  # not a VTune-only option any more


def test_dataloader_workers_started_by_spawn_run_the_copies(tmp_path):
    """Spawned DataLoader workers import the script again (its copy, under the launcher's hook): the run works."""
    dataset = textwrap.dedent(
        """\
        import torch


        class Ones(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, index):
                return torch.ones(4)
        """)
    script = textwrap.dedent(
        """\
        import torch

        from dataset import Ones
        from trainer import train

        if __name__ == "__main__":
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            loader = torch.utils.data.DataLoader(Ones(), batch_size=2, num_workers=2,
                                                 multiprocessing_context="spawn")
            for batch in loader:
                loss = model(batch).sum()
                loss.backward()
                optimizer.step()
            print("batches done")
        """)
    summary, stderr = _profile(tmp_path, script, dataset=dataset)
    assert _steps(summary) == [("step", 4)]
    assert summary["processes"] >= 1 and "batches done" in stderr
