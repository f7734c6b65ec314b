"""A process that replaces itself (``os.execv``) loses nothing, and a restart wrapper's new program is profiled.

A restart wrapper sets its environment, then runs the script again in place
of itself; a launcher or a crash handler execs another program. The exec
ends the image without exit(), so the collector writes what it holds first;
the new program of the same process keeps the files of the one before.

Real torch on a tiny model, the real built-in collector.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from instrumenter.builtin.samples.samplefile import read_sample_dir
from instrumenter.builtin.trace.events import read_trace_dir
from tests.test_processes import _profile, _steps

pytestmark = pytest.mark.slow

EXECS_MID_TRAINING = textwrap.dedent(
    """\
    import os
    import sys

    import torch

    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(200):
        if step == 51:  # inside the 52nd step: 51 are done
            print("replacing myself after", step, "steps", flush=True)
            os.execv(sys.executable, [sys.executable, "-c", NEXT_PROGRAM])
        optimizer.zero_grad()
        model(torch.ones(8)).sum().backward()
        optimizer.step()
    """
)

#: What the exec'd program runs: nothing of autoitt's, unless it makes ITT calls of its own.
QUIET = "print('the next program')"
#: A program making ITT calls of its own: its collector writes files of the same pid.
MARKS_ITS_OWN = ("import ittapi.compat as itt; d = itt.domain_create('next'); "
                 "[(itt.task_begin(d, 'work'), itt.task_end(d)) for _ in range(7)]; print('the next program')")

RESTARTS_ITSELF = textwrap.dedent(
    """\
    import os
    import sys

    if os.environ.get("OMP_NUM_THREADS") != "1":
        # a restart wrapper: set the environment, then run this script again in place of this process
        print("first image", os.getpid(), flush=True)
        os.environ["OMP_NUM_THREADS"] = "1"
        os.execv(sys.executable, [sys.executable, "-u"] + sys.argv)

    import torch

    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        optimizer.zero_grad()
        model(torch.ones(8)).sum().backward()
        optimizer.step()
    print("second image", os.getpid(), torch.get_num_threads(), sys.argv, __file__, sys.stdout.write_through,
          len(__import__("inspect").stack()), sys.orig_argv[1:], sys.path[0])
    """
)


@pytest.mark.parametrize("next_program, options", [(QUIET, ()), (MARKS_ITS_OWN, ()), (QUIET, ("--sample-rate", "0"))],
                         ids=["quiet", "marks-its-own", "without-sampling"])
def test_the_steps_recorded_before_an_exec_are_kept(tmp_path, next_program, options):
    summary, stderr = _profile(tmp_path, f"NEXT_PROGRAM = {next_program!r}\n" + EXECS_MID_TRAINING, options=options)
    assert "replacing myself after 51 steps" in stderr and "the next program" in stderr
    assert _steps(summary) == [("step", 51)]


def test_the_program_a_process_execs_never_overwrites_the_files_of_the_one_before(tmp_path):
    summary, _stderr = _profile(tmp_path, f"NEXT_PROGRAM = {MARKS_ITS_OWN!r}\n" + EXECS_MID_TRAINING)
    found = read_trace_dir(tmp_path / "out" / "itt")
    traces = found.traces
    assert found.skipped == []
    # one pid, two programs: the second's files are numbered past every pid (2**22 and up)
    assert len(traces) == 2 and traces[0].pid < 2 ** 22 and traces[1].pid == traces[0].pid + 2 ** 22
    assert {name for trace in traces for name in trace.domains.values()} >= {"next", "autoitt.train"}
    assert _steps(summary) == [("step", 51)]
    assert {samples.pid for samples in read_sample_dir(tmp_path / "out" / "itt")} <= {trace.pid for trace in traces}


def test_a_restart_wrapper_that_execs_the_script_again_runs_its_copy(tmp_path):
    (tmp_path / "train.py").write_text(RESTARTS_ITSELF)
    plain = subprocess.run([sys.executable, "train.py", "a"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    assert plain.returncode == 0, plain.stderr
    summary, stderr = _profile(tmp_path, RESTARTS_ITSELF, "a")
    first = stderr.split("first image ")[1].split()[0]
    # the same process (pid), the same interpreter options (-u), the script's own argv and __file__
    # and, as in the first image, only its own frame on the stack, its orig_argv and sys.path[0] as without autoitt
    assert (f"second image {first} 1 ['train.py', 'a'] {tmp_path / 'train.py'} True 1 ['-u', 'train.py', 'a'] "
            f"{tmp_path}") in stderr
    assert plain.stdout.split("second image ")[1].split(" ", 1)[1] == stderr.split(f"second image {first} ")[1].split("\n")[0] + "\n"
    assert _steps(summary) == [("step", 6)]
