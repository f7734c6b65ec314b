"""The default operator table (``--torch-ops sampled``) against torch.profiler, on small copies of real scripts.

Each script of ``tests/inputs/real`` (pytorch/examples' VAE, word language model and MNIST with its test
batches of 1000, and nanoGPT) runs three times: under ``autoitt profile`` as a user runs it, under
torch.profiler over the whole run (``tests/torch_reference.py --operators``), and, where torch.profiler's
own recording slows an operator, with that operator timed by the program's clock in autoitt's run
(``torch_reference.install_clock``, which costs a microsecond a call). The table must count torch.profiler's top operators exactly, and give their times within
15 % (widened by the interval the table states for an estimate).

Two things are pinned so that the runs compare what they measure rather than how each process happened to
run:

- glibc's allocator (:data:`ALLOCATOR`). By default it serves a large block (an Adam ``sqrt`` of a 784x400
  weight: 1.2 MB) by ``mmap`` and pays its page faults at each call, until a large block freed raises its
  threshold; what the process imported first decides when (``import ittapi.compat`` does, here). The VAE's
  Adam step took 430-470 ms plain, 380-390 ms with that import, 290 ms with the threshold fixed: an
  operator's time moved 25 % between processes that ran the same code, with no profiler involved.
- the comparison is of shares (each operator's time over the top operators' sum), so that a machine busier
  during one run than the other (the suite runs on two workers) moves both sides alike.

torch.profiler is not the truth everywhere: in nanoGPT its recording of ~800 events a step makes the GELUs
1.5-1.7x slower than they run without it (forward 59 µs a call by the clock, 98 under torch.profiler, 66
under autoitt; backward 102, 178 and 105). Those operators (:data:`CLOCKED`) are checked against the clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_profile import autoitt

#: timings compared between two profilers' runs: nothing else of the suite on the cores meanwhile (pyproject.toml)
pytestmark = pytest.mark.alone

REAL = Path(__file__).parent / "inputs" / "real"
REFERENCE = Path(__file__).parent / "torch_reference.py"
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}
#: Per script, the ``torch.nn.functional`` functions whose operators torch.profiler slows, and those operators
#: (forward, backward): checked against the program's clock, left out of the comparison with torch.profiler.
CLOCKED = {"nanogpt.py": {"gelu": ("aten::gelu", "aten::gelu_backward")}}
#: Per script, operators run back to back on the same memory whose split of their time differs between
#: profilers while their sum agrees: compared as one. MNIST's ``relu`` writes a 1.4 MB activation (21 MB
#: at the test batches) that ``max_pool2d`` reads next; torch.profiler, whose own work between the two lets
#: the writes drain, gives relu 300-330 µs a call and max_pool 3.24-3.36 ms, autoitt 243-249 µs and
#: 3.56-3.63 ms: relu 0.75-0.83 of torch.profiler's, the two together 1.03-1.09.
TOGETHER = {"mnist.py": ("aten::clamp_min", "aten::max_pool2d_with_indices")}
#: Per script, operators torch.profiler slows on torch's default (CUDA) build only, left out of the comparison of
#: times and ranks there. The VAE's Adam divides its 784x400 state by a number each step (``exp_avg_sq.sqrt() /
#: bias_correction2_sqrt``): torch.profiler gives ``aten::div`` 69 µs a call on 3.13's default build and 92 on
#: 3.14's, where the program's own clock (``Tensor.__truediv__`` timed, no profiler) gives 13.9 and autoitt 16.9
#: and 15.3; on the CPU build torch.profiler's is 21. Not a clock check of its own yet (CLOCKED times
#: ``torch.nn.functional`` functions).
SLOWED_ON_THE_DEFAULT_BUILD = {"vae.py": ("aten::div",)}
#: How many of torch.profiler's operators (by self time) are compared.
TOP = 5
#: Times are compared for operators whose calls average this long at least (torch.profiler's): a profiler's
#: own cost per call, a microsecond or two, lands partly in the call's time, and is over 15 % of a call of a
#: few microseconds (nanoGPT's 19,000 ``aten::copy_`` of 2-3 µs: 0.77-0.85 of torch.profiler's share).
TIMED_CALL_S = 20e-6
#: Counts are of the calls inside the iterations, where the sampled runs record: a call before the loop
#: (nanoGPT's first ``get_batch``: 8 of its 19,123 ``aten::copy_``) is in torch.profiler's count only.
OUTSIDE = 0.001
#: An estimated time is within this fraction of the reference's.
TOLERANCE = 0.15
SCRIPTS = ["vae.py", "word_language_model.py", "mnist.py", "nanogpt.py", "compile_loop.py"]


def _clocked(script: str, functions) -> str:
    """``script`` with the clock installed on ``functions`` first (its output: JSON on stderr at exit)."""
    prelude = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
               f"from tests.torch_reference import install_clock; install_clock({','.join(functions)!r})\n")
    return prelude + script


def _reference(*args, cwd):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    done = subprocess.run([sys.executable, str(REFERENCE), *args], cwd=cwd, env={**environment, **ALLOCATOR},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stderr.strip().splitlines()[-1])


class Attempts:
    """One script's runs, made on demand: attempt ``k`` is a run under torch.profiler and one under autoitt
    (with the clock where :data:`CLOCKED` says), each kept once made."""

    def __init__(self, script: str, work: Path) -> None:
        self.script, self.work, self.made = script, work, {}

    def get(self, k: int):
        """(script, autoitt's summary, torch.profiler's table, the clock's figures or None)."""
        if k not in self.made:
            self.made[k] = self._make(self.work / f"attempt{k}")
        return self.made[k]

    def _make(self, work: Path):
        work.mkdir()
        script = (REAL / self.script).read_text()
        (work / self.script).write_text(script)
        table = _reference("--operators", self.script, cwd=work)
        clocked = CLOCKED.get(self.script)
        if clocked:
            (work / self.script).write_text(_clocked(script, clocked))
        done = autoitt("profile", "--json", "-r", "out", self.script, cwd=work, env=ALLOCATOR)
        assert done.returncode == 0, done.stderr[-3000:]
        clock = next(json.loads(line) for line in reversed(done.stderr.splitlines())
                     if line.startswith("{") and set(clocked) <= set(json.loads(line))) if clocked else None
        return self.script, json.loads(done.stdout), table, clock


#: How many attempts a comparison of times gets. The suite shares two cores between two workers, and a run
#: whose steps lost their core to the other worker's for milliseconds measures that: the VAE's aten::mm at
#: 2.2x torch.profiler's share once, with the table's own interval at +-38 % saying how unsure it was. Each
#: attempt is a new pair of runs; the figures must hold in one of them. Counts are exact and need one.
ATTEMPTS = 3


def _holds(runs: Attempts, check) -> None:
    """``check(script, summary, table, clock)`` (a failure's text, or None) holds in one of :data:`ATTEMPTS`."""
    failures = []
    for k in range(ATTEMPTS):
        failure = check(*runs.get(k))
        if failure is None:
            return
        failures.append(f"attempt {k + 1}: {failure}")
    pytest.fail("\n".join(failures))


@pytest.fixture(scope="module", params=SCRIPTS)
def runs(request, tmp_path_factory):
    return Attempts(request.param, tmp_path_factory.mktemp(request.param.split(".")[0]))


def _default_build() -> bool:
    import torch

    return torch.version.cuda is not None


def _top(script, table, timed=False):
    """torch.profiler's top operators by self time, less those it slows itself (``timed``: and those whose
    calls are too short to time, :data:`TIMED_CALL_S`)."""
    slowed = {op for pair in CLOCKED.get(script, {}).values() for op in pair}
    if timed and _default_build():
        slowed |= set(SLOWED_ON_THE_DEFAULT_BUILD.get(script, ()))
    top = sorted((name for name in table if name not in slowed), key=lambda name: -table[name][1])[:TOP]
    return [name for name in top if not timed or table[name][1] >= TIMED_CALL_S * table[name][0]]


def _shares(times):
    whole = sum(times.values())
    return {name: value / whole for name, value in times.items()}


@pytest.mark.slow
def test_the_top_operators_are_counted_exactly(runs):
    script, summary, table, _ = runs.get(0)
    ours = {op["name"]: op["count"] for op in summary["operators"]}
    counted = {name: ours.get(name) for name in _top(script, table)}
    assert all(count is not None and table[name][0] * (1 - OUTSIDE) <= count <= table[name][0]
               for name, count in counted.items()), (counted, {name: table[name][0] for name in counted})
    assert sum(count == table[name][0] for name, count in counted.items()) >= TOP - 1, counted


def _times_off(script, summary, table, _clock):
    top = _top(script, table, timed=True)
    ours = {op["name"]: op for op in summary["operators"]}
    if not set(top) <= set(ours):
        return f"{sorted(set(top) - set(ours))} missing from {script}'s table"
    together = tuple(name for name in TOGETHER.get(script, ()) if name in top)
    groups = [(name,) for name in top if name not in together] + ([together] if together else [])
    theirs = _shares({group: sum(table[name][1] for name in group) for group in groups})
    mine = _shares({group: sum(ours[name]["self_with_library_s"] for name in group) for group in groups})
    off = {}
    for group in groups:
        stated = (sum(ours[name]["self_with_library_interval_s"] ** 2 for name in group) ** 0.5
                  / sum(ours[name]["self_with_library_s"] for name in group))
        if abs(mine[group] / theirs[group] - 1) > TOLERANCE + stated:
            off[" + ".join(group)] = (round(mine[group] / theirs[group], 2), f"+-{stated:.0%}")
    return f"{script}: share against torch.profiler's {off}" if off else None


@pytest.mark.slow
def test_the_top_operators_times_are_within_15_percent_of_torch_profilers(runs):
    # within 15 % and the table's own interval: an operator of few calls per step (the word language model's
    # _log_softmax, 2 % of the time) varies between steps more than the steps measured can pin down, and its
    # row says so (+-19 % there)
    _holds(runs, _times_off)


def _swapped(script, summary, table, _clock):
    top = _top(script, table, timed=True)
    rank = {op["name"]: at for at, op in enumerate(summary["operators"])}
    apart = (1 + TOLERANCE) ** 2
    together = set(TOGETHER.get(script, ()))
    swapped = [(a, b) for i, a in enumerate(top) for b in top[i + 1:]
               if table[a][1] > apart * table[b][1] and rank.get(a, len(rank)) > rank.get(b, len(rank))
               and not {a, b} <= together]
    return f"{script}: ranked below where torch.profiler's is far above: {swapped}" if swapped else None


@pytest.mark.slow
def test_the_top_operators_rank_as_torch_profiler_ranks_them(runs):
    # two operators whose times are within both tolerances of each other may swap: only pairs further apart
    _holds(runs, _swapped)


def _clock_off(script, summary, table, clock):
    ours = {op["name"]: op for op in summary["operators"]}
    for function, (forward, backward) in CLOCKED[script].items():
        timed = clock[function]
        for name, calls, seconds in ((forward, timed["calls"], timed["forward_s"]),
                                     (backward, timed["backward_calls"], timed["backward_s"])):
            per_call, clocked = ours[name]["total_s"] / ours[name]["count"], seconds / calls
            if abs(per_call / clocked - 1) > TOLERANCE:
                return f"{name}: {per_call * 1e6:.1f} µs a call, the clock {clocked * 1e6:.1f}"
            # and torch.profiler's is far off: the reason it is not the reference here
            theirs = table[name][1] / table[name][0]
            if theirs <= (1 + 2 * TOLERANCE) * clocked:
                return f"{name}: torch.profiler's {theirs * 1e6:.1f} µs a call is near the clock's {clocked * 1e6:.1f}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("runs", sorted(CLOCKED), indirect=True)
def test_an_operator_torch_profiler_slows_is_timed_as_the_programs_clock_times_it(runs):
    _holds(runs, _clock_off)
