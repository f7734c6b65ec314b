"""The instrument options, each changing exactly what it says."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from instrumenter.cli import cli
from instrumenter.launch.launchers import find_launcher, script_launcher_at, under_launcher, vtune_launcher_problem
from tests.conftest import SAMPLES
from tests.scripts import TORCH_TRAIN
from transforms import MAX_PT_REGIONS, Mode, Outcome, instrument_source, strip_markers

#: tests/scripts.TORCH_TRAIN as bytes, after a blank first line.
TORCH_SCRIPT = ("\n" + TORCH_TRAIN).encode()


def _copy(data: bytes, mode: Mode = Mode()) -> str:
    return instrument_source(data, "train.py", mode).output.decode()


def test_torch_scripts_get_emit_itt_and_the_training_range():
    copy = _copy(TORCH_SCRIPT)
    assert "with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):" in copy
    assert 'torch.profiler.itt.range_push("training")' in copy
    assert copy.count("torch.profiler.itt.range_pop()") == 1


def test_no_torch_ops_leaves_emit_itt_out():
    copy = _copy(TORCH_SCRIPT, Mode(torch_ops="off"))
    assert "emit_itt" not in copy and "range_push" not in copy
    assert 'itt.task_begin(_autoitt_domain, "step")' in copy


def test_a_script_running_torch_profiler_gets_no_nested_emit_itt():
    script = TORCH_SCRIPT.replace(
        b"for step in range(3):", b"with torch.profiler.profile() as prof:\n  pass\nfor step in range(3):"
    )
    result = instrument_source(script, "train.py")
    assert "emit_itt" not in result.output.decode()
    assert any("torch.profiler.profile" in note.message for note in result.plan.notes)


def test_torch_imported_under_an_alias_is_used_by_that_name():
    script = TORCH_SCRIPT.replace(b"import torch\n", b"import torch as th\ntorch = None\n").replace(b"torch.", b"th.")
    copy = _copy(script)
    assert "with th.autograd.profiler.emit_itt(enabled=not th.autograd._profiler_enabled()):" in copy


def test_tensorflow_scripts_get_no_torch_markers():
    source = (SAMPLES / "tf1_session.py").read_bytes()
    assert "torch" not in _copy(source)
    # the same check sees torch markers when the same loops are a torch script's: the script's own import aside
    with_torch = _copy(b"import torch\n" + source).splitlines()
    assert [line for line in with_torch[1:] if "torch" in line] != []


def test_domain_option_names_the_domain():
    assert 'itt.domain_create("my.training")' in _copy(TORCH_SCRIPT, Mode(domain="my.training"))


def test_default_domain_is_derived_from_the_script_name():
    assert 'itt.domain_create("autoitt.train")' in _copy(TORCH_SCRIPT)


def test_label_option_renames_the_task_of_that_line():
    result = CliRunner().invoke(cli, ["instrument", str(SAMPLES / "torch_train.py"), "--diff", "--label", "115=batch"])
    assert result.exit_code == 0, result.output
    assert '+                            itt.task_begin(_autoitt_domain, "batch")' in result.stdout
    assert '"batch_loop"' in result.stdout


def test_pt_regions_are_created_once_and_marked_per_step():
    copy = _copy(TORCH_SCRIPT, Mode(pt_regions=True))
    assert '_autoitt_pt_0 = itt.pt_region_create("step")' in copy
    assert "itt.pt_region_begin(_autoitt_pt_0)" in copy
    assert "itt.pt_region_end(_autoitt_pt_0)" in copy


def test_pt_regions_stop_at_the_api_limit_with_a_note():
    loops = "".join(f"def f{i}():\n    for x in d:\n        loss.backward()\n" for i in range(MAX_PT_REGIONS + 2))
    result = instrument_source(loops.encode(), "many.py", Mode(pt_regions=True))
    copy = result.output.decode()
    assert copy.count("pt_region_create(") == MAX_PT_REGIONS
    assert sum("anomaly-detection" in note.message for note in result.plan.notes) == 2


def test_future_imports_and_docstring_stay_first():
    script = b'"""Doc."""\nfrom __future__ import annotations\n\nfor x in d:\n    loss.backward()\n'
    copy = _copy(script)
    assert copy.startswith('"""Doc."""\nfrom __future__ import annotations\nimport ittapi.compat as itt\n')


def test_internal_error_exits_123_and_writes_nothing(tmp_path, monkeypatch):
    import transforms._rewrite as rewrite_module

    def broken(data, plan):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(rewrite_module, "rewrite_module", broken)
    script = tmp_path / "train.py"
    script.write_bytes(TORCH_SCRIPT)
    result = CliRunner().invoke(cli, ["instrument", str(script)])
    assert result.exit_code == 123
    assert "simulated bug" in result.stderr and "bug in autoitt" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_instrument_never_imports_torch_or_tensorflow(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(TORCH_SCRIPT)
    code = textwrap.dedent(
        f"""
        import sys
        from click.testing import CliRunner
        from instrumenter.cli import cli
        result = CliRunner().invoke(cli, ["instrument", {str(script)!r}])
        assert result.exit_code == 0, result.output
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "keras")))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _block_limit() -> int:
    """The running Python's limit of statically nested blocks (20 up to 3.12, 21 from 3.13)."""
    for n in range(10, 64):
        try:
            compile("".join(" " * d + f"for i{d} in ():\n" for d in range(n)) + " " * n + "pass\n", "probe", "exec")
        except SyntaxError:
            return n - 1
    raise AssertionError("no limit of nested blocks found")


#: The shapes below were drawn for 3.11's limit; a later Python's extra blocks are taken up by `with`
#: statements around them (which shift their lines by as many).
EXTRA = _block_limit() - 20
PAD = b"".join(b"    " * d + f"with c{d}:\n".encode() for d in range(EXTRA))


def padded(code: bytes) -> bytes:
    return PAD + b"".join(b"    " * EXTRA + line if line.strip() else line for line in code.splitlines(keepends=True))


DEEP = padded(b"".join(b"    " * depth + f"for i{depth} in range(2):\n".encode() for depth in range(7))
              + b"    " * 7 + b"loss.backward()\n")


def test_code_nested_too_deep_for_python_loses_intermediate_markers_not_the_step():
    result = instrument_source(DEEP, "deep.py")
    compile(result.output, "deep_itt.py", "exec")
    roles = [(region.line, region.role) for region in result.regions]
    assert (1 + EXTRA, "epoch") in roles and (7 + EXTRA, "step") in roles and (6 + EXTRA, "epoch") not in roles
    assert any(note.line == 6 + EXTRA and "nest deeper than Python allows" in note.message
               for note in result.plan.notes)
    assert strip_markers(result.output, "deep_itt.py") == DEEP


def test_code_too_deep_even_for_one_region_is_left_as_it_is():
    deepest = b"".join(b" " * depth + f"for i{depth} in range(2):\n".encode() for depth in range(19 + EXTRA)) + \
        b" " * (19 + EXTRA) + b"loss.backward()\n"
    result = instrument_source(deepest, "deepest.py")
    assert result.outcome is Outcome.NOTHING_TO_DO and result.output is None
    assert any("nest deeper than Python allows" in note.message for note in result.plan.notes)


def test_code_too_deep_in_one_function_leaves_the_other_functions_marked():
    deep = b"def main():\n" + b"".join(b"    " * (depth + 1) + f"with c{depth}:\n".encode()
                                       for depth in range(18 + EXTRA)) + \
        b"    " * (19 + EXTRA) + b"for step in range(2):\n" + b"    " * (20 + EXTRA) + b"loss.backward()\n"
    shallow = b"\n\ndef train():\n    for step in range(2):\n        loss.backward()\n"
    result = instrument_source(deep + shallow, "deep2.py")
    compile(result.output, "deep2_itt.py", "exec")
    train_line = deep.count(b"\n") + 4
    assert [(r.line, r.function) for r in result.regions] == [(train_line, "train")]
    notes = [note.line for note in result.plan.notes if "nest deeper than Python allows" in note.message]
    assert notes == [20 + EXTRA]
    assert strip_markers(result.output, "deep2_itt.py") == deep + shallow


# -- command lines under --launcher (pure: nothing runs) -----------------------------------------------------------

#: What autoitt runs per rank: its interpreter running the script's .pyc, which the process's sitecustomize
#: writes from the copy (see instrumenter.launch; no launcher script any more): the script's arguments follow it.
TARGET = ("/venv/bin/python", "/runs/t-1/train.autoitt.pyc", "--epochs", "1")
VTUNE_COMMAND = ("/opt/vtune", "-collect", "hotspots", "--", *TARGET)


#: TARGET as torchrun, accelerate and deepspeed run a script: unbuffered, with autoitt's interpreter.
UNBUFFERED = (TARGET[0], "-u", *TARGET[1:])


def test_torchrun_after_srun_runs_autoitts_interpreter():
    assert under_launcher(["srun", "-N", "2", "torchrun", "--nnodes", "2"], TARGET) == (
        "srun", "-N", "2", "torchrun", "--no-python", "--nnodes", "2", *UNBUFFERED)


def test_torchrun_after_mpirun_runs_autoitts_interpreter():
    assert under_launcher(["mpirun", "-n", "1", "/opt/bin/torchrun"], TARGET) == (
        "mpirun", "-n", "1", "/opt/bin/torchrun", "--no-python", *UNBUFFERED)


def test_torch_distributed_run_as_a_module_is_torchrun():
    launcher = ["srun", "python", "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    assert under_launcher(launcher, TARGET) == (*launcher[:4], "--no-python", *launcher[4:], *UNBUFFERED)


@pytest.mark.parametrize("launcher", [("accelerate", "launch"), ("/venv/bin/accelerate-launch",),
                                      ("python", "-m", "accelerate.commands.launch")])
def test_accelerate_launch_is_given_no_python_and_autoitts_interpreter(launcher):
    """accelerate runs its ``training_script`` with its own interpreter: given autoitt's command as it was, it ran
    ``python python <launcher> ...`` ("source code cannot contain null bytes")."""
    assert script_launcher_at([*launcher, "--cpu"]) == ("accelerate", len(launcher))
    assert under_launcher([*launcher, "--cpu", "--num_processes", "2"], TARGET) == (
        *launcher, "--no_python", "--cpu", "--num_processes", "2", *UNBUFFERED)
    assert under_launcher([*launcher, "--no_python", "--cpu"], TARGET) == (*launcher, "--no_python", "--cpu",
                                                                           *TARGET)
    assert script_launcher_at(["accelerate", "config"]) is None


def test_deepspeed_gives_the_script_its_local_rank_where_deepspeed_would():
    """deepspeed puts --local_rank=N right after the script it runs: that would be autoitt's launcher script, so
    it is given --no_local_rank and the user's script gets --local_rank=$LOCAL_RANK ahead of its arguments."""
    at = TARGET.index("/runs/t-1/train.autoitt.pyc") + 1
    command = under_launcher(["deepspeed", "--num_gpus", "2"], TARGET, args_at=at)
    assert command[:6] == ("deepspeed", "--no_python", "--no_local_rank", "--num_gpus", "2", "sh")
    script = command[7]
    assert command[6::2] == ("-c", "sh", "1") and command[-2] == "--epochs"
    assert script == 'exec /venv/bin/python -u /runs/t-1/train.autoitt.pyc --local_rank="$LOCAL_RANK" "$@"'
    done = subprocess.run(["sh", "-c", script.replace("exec ", "exec echo ", 1), "sh", "--epochs", "1 2"],
                          env={"LOCAL_RANK": "3"}, capture_output=True, text=True)
    assert done.stdout.split()[-5:] == ["/runs/t-1/train.autoitt.pyc", "--local_rank=3", "--epochs", "1", "2"]
    assert under_launcher(["deepspeed", "--no_local_rank", "--num_gpus", "2"], TARGET, args_at=at) == (
        "deepspeed", "--no_python", "--no_local_rank", "--num_gpus", "2", *UNBUFFERED)
    assert "--no_local_rank" in vtune_launcher_problem(["deepspeed", "--num_gpus", "2"])
    assert vtune_launcher_problem(["deepspeed", "--no_local_rank"]) is None


def test_a_launcher_beside_autoitts_interpreter_is_found_without_path(tmp_path):
    """``.venv/bin/torchrun`` without the environment activated: found in the folder of the interpreter, which is
    not resolved (a virtual environment's python links to the base interpreter, elsewhere)."""
    venv, elsewhere = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for folder in (venv, elsewhere):
        folder.mkdir(parents=True)
    for program in (venv / "torchrun", elsewhere / "torchrun", elsewhere / "mpirun"):
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    (venv / "python").symlink_to(sys.executable)
    python = str(venv / "python")
    assert find_launcher("torchrun", python, path="/nonexistent", virtual=True) == str(venv / "torchrun")
    assert find_launcher("torchrun", python, path=str(elsewhere), virtual=True) == str(venv / "torchrun")
    assert find_launcher("torchrun", python, path=str(elsewhere), virtual=False) == str(elsewhere / "torchrun")
    assert find_launcher("mpirun", python, path=str(elsewhere), virtual=True) == str(elsewhere / "mpirun")
    assert find_launcher("no-such-launcher", python, path=str(elsewhere)) is None
    assert find_launcher(str(elsewhere / "mpirun"), python, path="") == str(elsewhere / "mpirun")


@pytest.mark.parametrize("flag", ["--no-python", "--no_python"])
def test_a_users_no_python_keeps_autoitts_command_as_it_is(flag):
    assert under_launcher(["torchrun", flag, "--standalone"], TARGET) == ("torchrun", flag, "--standalone", *TARGET)


def test_other_launchers_run_the_whole_command():
    assert under_launcher(["mpirun", "-n", "4"], TARGET) == ("mpirun", "-n", "4", *TARGET)
    assert under_launcher(["srun", "-n", "4"], TARGET) == ("srun", "-n", "4", *TARGET)


def test_a_program_under_torchrun_gets_no_python_right_after_the_torchrun_word():
    assert under_launcher(["srun", "torchrun", "--standalone"], VTUNE_COMMAND, python=False) == (
        "srun", "torchrun", "--no-python", "--standalone", *VTUNE_COMMAND)
    assert under_launcher(["python", "-m", "torch.distributed.run", "--nproc_per_node", "2"], VTUNE_COMMAND,
                          python=False) == ("python", "-m", "torch.distributed.run", "--no-python",
                                            "--nproc_per_node", "2", *VTUNE_COMMAND)


@pytest.mark.parametrize("flag", ["--no-python", "--no_python"])
def test_a_program_under_torchrun_keeps_the_users_no_python_once(flag):
    assert under_launcher(["torchrun", "--standalone", flag], VTUNE_COMMAND, python=False) == (
        "torchrun", "--standalone", flag, *VTUNE_COMMAND)


def test_torch_distributed_launch_runs_vtune_only_with_use_env():
    assert "--use-env" in vtune_launcher_problem(["python", "-m", "torch.distributed.launch", "--nproc_per_node", "2"])
    assert vtune_launcher_problem(["python", "-m", "torch.distributed.launch", "--use_env"]) is None
    assert vtune_launcher_problem(["torchrun", "--standalone"]) is None
    assert vtune_launcher_problem(["mpirun", "-n", "4"]) is None
