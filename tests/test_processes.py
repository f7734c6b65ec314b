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

from tests.conftest import free_port
from tests.gloo_exit import past_gloos_exit_abort
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


def _profile(folder, script: str, *args: str, options=(), **files: str):
    """(summary, stderr) of ``script`` profiled as ``folder``'s train.py with autoitt's ``options`` and the script's
    ``args``, beside trainer.py (TRAINER) and ``files`` (module name -> text); the run must succeed."""
    for name, text in {"trainer": TRAINER, **files}.items():
        (folder / f"{name}.py").write_text(text)
    (folder / "train.py").write_text(script)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", *options, "train.py", *args, cwd=folder)
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


#: Two gloo ranks of DDP on a tiny model.
DDP_TRAINER = textwrap.dedent(
    """\
    import sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        loss = model(torch.ones(4)).sum()
        loss.backward()
        optimizer.step()
    # One write per line: under -u (as every launcher runs the ranks) print() writes each of its pieces
    # separately, and the two ranks' pieces interleaved on a loaded machine.
    sys.stdout.write(f"rank {dist.get_rank()} done {sys.executable} {sys.argv[1:]}\\n")
    # The process group torn down while the interpreter is whole: it narrows gloo's abort at exit
    # (pytorch/pytorch#179291; tests/gloo_exit.py says why it does not close it). Without these lines,
    # measured on 2026-12-03 through torchrun, one run at a time: 6 of 16 plain-Python runs aborted,
    # 0 of 16 under autoitt profile.
    del optimizer, model
    dist.barrier()
    dist.destroy_process_group()
    """)

#: PATH without the folder of the interpreter running the tests (and autoitt): its launchers are found there only.
PATH_WITHOUT_BIN = os.pathsep.join(folder for folder in os.environ.get("PATH", os.defpath).split(os.pathsep)
                                   if folder and os.path.abspath(folder) != os.path.dirname(sys.executable))


def _profile_ranks(folder, launcher, *args, env=None):
    """(summary, finished) of ``folder``'s train.py profiled through ``launcher``, which must succeed: run again
    for gloo's abort at exit only (tests/gloo_exit.py; the teardown in DDP_TRAINER narrows it, and a loaded
    machine still saw it once in five full suite runs, after both ranks trained and wrote their traces)."""
    def run():
        shutil.rmtree(folder / "out", ignore_errors=True)
        return autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "--launcher", launcher, "train.py",
                       *args, cwd=folder, env=env)

    done = past_gloos_exit_abort(run)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done


def _ddp_ranks_through(folder, launcher, *args):
    """(summary, finished) of DDP_TRAINER profiled through ``launcher``, a bare name found beside the interpreter."""
    (folder / "train.py").write_text(DDP_TRAINER)
    summary, done = _profile_ranks(folder, launcher, *args, env={"PATH": PATH_WITHOUT_BIN})
    assert [(rank["rank"], [(s["label"], s["count"]) for s in rank["steps"]]) for rank in summary["ranks"]] == [
        (0, [("step", 3)]), (1, [("step", 3)])]
    assert _process_names(folder / "out") >= {"rank 0", "rank 1"}
    return summary, done


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
def test_torchrun_ranks_with_the_builtin_collector(tmp_path):
    summary, _done = _ddp_ranks_through(tmp_path, "torchrun --standalone --nproc_per_node 2")
    assert _steps(summary) == [("step", 6)]
    assert [(late["label"], late["steps"], late["ranks"]) for late in summary["stragglers"]] == [("step", 3, [0, 1])]
    # steps.svg: a line per rank over the run's 3 step numbers, not the ranks' 6 steps end to end
    svg = (tmp_path / "out" / "steps.svg").read_text()
    assert svg.count('class="steps" data-rank=') == 2 and 'data-step="3"' in svg and 'data-step="6"' not in svg


@pytest.mark.skipif(shutil.which("accelerate", path=os.path.dirname(sys.executable)) is None, reason="no accelerate")
def test_accelerate_launch_ranks_with_a_launcher_found_beside_the_interpreter(tmp_path):
    """``accelerate launch`` is handed autoitt's interpreter with --no_python (given the launcher script, it ran
    ``python python ...``). ``--multi_gpu --num_processes 2`` starts two ranks through torch.distributed.run, on CPUs
    too; ``--cpu --num_processes 2`` starts one process (accelerate runs several CPU ranks only through mpirun).
    ``accelerate`` is not on PATH: it is found beside the interpreter running autoitt."""
    assert shutil.which("accelerate", path=PATH_WITHOUT_BIN) is None
    _, done = _ddp_ranks_through(tmp_path, "accelerate launch --multi_gpu --num_processes 2 --num_machines 1 "
                                           f"--main_process_port {free_port()} --mixed_precision no "
                                           "--dynamo_backend no", "--epochs", "1")
    assert done.stderr.count(f"done {sys.executable} ['--epochs', '1']") == 2


@pytest.mark.skipif(shutil.which("deepspeed", path=os.path.dirname(sys.executable)) is None, reason="no deepspeed")
def test_deepspeed_ranks_and_the_local_rank_it_gives_the_script(tmp_path):
    """The DeepSpeed launcher on CPUs (--num_gpus 2: two ranks, gloo); the script still gets ``--local_rank=N``
    ahead of its arguments, as deepspeed gives it, though autoitt tells deepspeed --no_local_rank (so that it runs
    autoitt's interpreter with no script of its own in front) and passes the rank on itself."""
    _, done = _ddp_ranks_through(tmp_path, f"deepspeed --num_gpus 2 --master_port {free_port()}", "--epochs", "1")
    for rank in (0, 1):
        assert f"done {sys.executable} ['--local_rank={rank}', '--epochs', '1']" in done.stderr


def test_children_inherit_autoitts_site_folder_and_a_clean_child_runs_as_it_is(tmp_path):
    """The script's environment names the site folder that makes its multiprocessing children run copies
    (and the run's instrumentation.json); a child started with a clean environment (python -I) simply
    runs as it is."""
    script = textwrap.dedent(
        """\
        import os, subprocess, sys
        first = os.environ["PYTHONPATH"].split(os.pathsep)[0]
        print("site folder:", os.path.basename(first), os.path.isfile(os.path.join(first, "sitecustomize.py")))
        print("instrumentation:", os.path.basename(os.environ["AUTOITT_INSTRUMENTATION"]))
        print(subprocess.run([sys.executable, "-I", "-c", "print(42)"], capture_output=True, text=True).stdout)
        """)
    (tmp_path / "train.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTOITT_INSTRUMENTATION")}
    done = subprocess.run([sys.executable, "-m", "instrumenter", "profile", "--backend", "builtin", "-r", "out",
                           "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "site folder: site True" in done.stdout
    assert "instrumentation: instrumentation.json" in done.stdout
    assert "42" in done.stdout


def _two_ranks_through(folder, name, launcher_source, env=None):
    """(summary, finished command) of a 3-step trainer profiled through a stand-in launcher ``name`` -n 2."""
    launcher = folder / name
    launcher.write_text(launcher_source)
    launcher.chmod(0o755)
    (folder / "train.py").write_text(TRAINER + "\nimport torch\ntrain(torch.nn.Linear(4, 1), 3)\n")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "--launcher", f"{launcher} -n 2",
                   "train.py", cwd=folder, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done


def test_an_mpirun_style_launcher_with_the_builtin_collector(tmp_path):
    """A stand-in mpirun (tests/test_vtune.FAKE_MPIRUN: one process per rank, PMI_RANK set), as MPICH's would."""
    from tests.test_vtune import FAKE_MPIRUN

    summary, done = _two_ranks_through(tmp_path, "mpirun", FAKE_MPIRUN)
    assert [(rank["rank"], rank["steps"][0]["count"]) for rank in summary["ranks"]] == [(0, 3), (1, 3)]
    assert "--launcher" not in done.stderr  # not a VTune-only option any more


#: The variables a launcher sets; emptied (the collector passes over an empty one) unless a test sets them.
NO_LAUNCHER = {name: "" for name in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                                     "SLURM_NTASKS", "SLURM_NPROCS")}


def _process_names(folder) -> set:
    trace = json.loads((folder / "trace.json").read_text())["traceEvents"]
    return {e["args"]["name"].split(" (")[0] for e in trace if e["name"] == "process_name"}


@pytest.mark.parametrize("launcher", [{"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, {"RANK": "0"}],
                         ids=["single-task sbatch job", "one rank"])
def test_a_single_process_with_a_launchers_rank_shows_nothing_rank_specific(tmp_path, launcher):
    (tmp_path / "train.py").write_text(TRAINER + "\nimport torch\ntrain(torch.nn.Linear(4, 1), 3)\n")
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "train.py", cwd=tmp_path,
                   env={**NO_LAUNCHER, **launcher})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "per rank" not in done.stdout and "Stragglers" not in done.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["ranks"], summary["stragglers"]) == ([], [])
    assert _process_names(tmp_path / "out") == {"train.py"}


LOCAL_RANK_LAUNCHER = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    # `launch -n N CMD...`: runs CMD once per rank, one after another, with only LOCAL_RANK set.
    import os, subprocess, sys
    n = int(sys.argv[2])
    sys.exit(max(subprocess.call(sys.argv[3:], env={**os.environ, "LOCAL_RANK": str(rank)}) for rank in range(n)))
    """
)


def test_local_rank_alone_gives_each_process_its_rank(tmp_path):
    """A stand-in launcher that sets only LOCAL_RANK, as some single-node launchers do."""
    summary, _ = _two_ranks_through(tmp_path, "launch", LOCAL_RANK_LAUNCHER, env=NO_LAUNCHER)
    assert [(rank["rank"], rank["steps"][0]["count"]) for rank in summary["ranks"]] == [(0, 3), (1, 3)]
    assert _process_names(tmp_path / "out") == {"rank 0", "rank 1"}


def test_dataloader_workers_started_by_spawn_run_the_copies(tmp_path):
    """Spawned DataLoader workers import the script and its modules again: the copies, under the launcher's
    hook. Each worker leaves a file saying which it got (a copy defines the domain variable)."""
    dataset = textwrap.dedent(
        """\
        import os
        import sys

        import torch


        def warm_up(model, optimizer):  # a step loop, so this module has a copy; never called
            for _ in range(1):
                model(torch.ones(4)).sum().backward()
                optimizer.step()


        def _which(module_globals):
            return "copy" if "_autoitt_domain" in module_globals else "original"


        class Ones(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, index):
                main = vars(sys.modules.get("__mp_main__", sys.modules["__main__"]))
                seen = f"{os.getpid()}-main-{_which(main)}-module-{_which(globals())}"
                open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "seen", seen), "w").close()
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
    (tmp_path / "seen").mkdir()
    summary, stderr = _profile(tmp_path, script, dataset=dataset)
    assert _steps(summary) == [("step", 4)]
    assert "batches done" in stderr
    seen = {name.split("-", 1)[1] for name in os.listdir(tmp_path / "seen")}
    assert seen == {"main-copy-module-copy"}
    workers = {int(name.split("-")[0]) for name in os.listdir(tmp_path / "seen")}
    assert len(workers) == 2  # both workers
    # sampled from their start, as a forked worker is: a spawned one makes no ITT call that would load the collector
    from instrumenter.builtin.samples.samplefile import read_sample_dir

    assert workers <= {samples.pid for samples in read_sample_dir(tmp_path / "out" / "itt")}


def test_a_child_of_another_script_runs_that_scripts_own_modules(tmp_path):
    """The profiled script runs another script (subprocess), which spawns a worker: neither that script nor
    the modules its worker imports are instrumented, as the README says."""
    other = textwrap.dedent(
        """\
        import multiprocessing as mp

        import trainer


        def work(queue):
            queue.put("_autoitt_domain" in vars(trainer))


        if __name__ == "__main__":
            context = mp.get_context("spawn")
            queue = context.Queue()
            worker = context.Process(target=work, args=(queue,))
            worker.start()
            print("worker imported a copy:", queue.get())
            worker.join()
        """)
    script = "import subprocess, sys\nimport trainer\n" \
             "print(subprocess.run([sys.executable, 'other.py'], capture_output=True, text=True).stdout)\n"
    summary, stderr = _profile(tmp_path, script, other=other)
    assert "worker imported a copy: False" in stderr
