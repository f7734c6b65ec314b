"""What each part of autoitt's per-step work costs a real PyTorch step, measured inside one process.

Separate processes of one script differ by several percent on this VM (``autoitt compare``'s noise
measurement: a coefficient of variation of 8.5 %), more than the parts being measured. So this runs one
process per loop with the collector attached (``INTEL_LIBITTNOTIFY64``, sampling off), one with it
sampling as ``autoitt profile`` does here (CPU-time timers at ``formats.SAMPLE_HZ_TIMER``, 50 a second, or ``--sample-hz``), and, for
scale, one without it (the ITT calls are no-ops), and inside each alternates blocks of steps, each block
one way of marking the step:

* ``bare``: the step alone;
* ``task``: a step task on a domain that is not one of autoitt's own (the runtime's ``task_begin`` with its
  string handle made once, the collector's begin and end records);
* ``own task``: the same on an own domain (``autoitt.train``): the collector also reads the process's
  counters at its begin and end (counters.c, at most once per ``COUNT_EVERY_NS`` per nesting depth);
* ``own task, operators 1/N``: and PyTorch's operators recorded in every N-th step, as
  ``--torch-ops sampled`` does (:class:`instrumenter.runtime.torch_ops.OperatorToggle`; no ranges);
* ``sampled`` (the sampling process only): the bare step with the sampler's signal let through. In every
  other block of that process the thread blocks the signal (``pthread_sigmask``): the timer expires
  once and its signal waits, and Linux re-arms a periodic POSIX timer only when its signal is taken,
  so this case is what the timers' expiries, the signals and the handler cost a step; the rest of
  sampling (the timers' existence, the scanner thread, the hooks) is in the baseline too. The signal
  left waiting is taken as the block opens, with the periods it stands for: the samples file is not
  what a run's is.

Each round runs every case once (``--block`` steps each), so drift hits them alike; a case's cost is the
median over rounds of its block's mean step minus the same round's ``bare`` block's, with the quartiles.
Loops: ``conv`` (samples/torch_train.py's ConvNet and data, a step of about 0.45 ms) and ``small_ops`` (a
12-layer MLP of width 64 at batch 8 with Adam, about 1.3 ms), one thread each.

Usage: ``python benchmarks/bench_step_parts.py [--rounds 15] [--block 200] [--only conv|small_ops]
[--every 20,50] [--sample-hz 50]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench_small_ops import CONV_SETUP, SMALL_OPS_SETUP  # noqa: E402 (this folder is on sys.path)

#: Each loop: its model and data (bench_small_ops.py's), and ``step(i)``.
LOOPS = {
    "conv": CONV_SETUP + """
def step(i):
    data, target = batches[i % len(batches)]
    optimizer.zero_grad()
    criterion(model(data), target).backward()
    optimizer.step()
""",
    "small_ops": SMALL_OPS_SETUP + """
def step(i):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
""",
}

CHILD = """
import json, signal, statistics, sys, time
import torch
import ittapi.compat as ittc
from instrumenter.runtime.collection import Collection, markers
from instrumenter.runtime.torch_ops import OperatorSampling, OperatorToggle

torch.manual_seed(0)
torch.set_num_threads(1)
{loop}
rounds, block, everies = {rounds}, {block}, {everies}
itt = Collection(ittc)
own, other = itt.domain_create("autoitt.train"), itt.domain_create("bench.other")
cases = {{"bare": (None, None), "task": (itt, other), "own task": (itt, own)}}
for every in everies:
    toggle = OperatorToggle(OperatorSampling.one_in(every))
    toggle.add(["step"])
    cases[f"own task, operators 1/{{every}}"] = (markers(toggle), own)  # a copy's markers, with this rule
signal_number = {signal_number}
if signal_number:
    cases["sampled"] = (None, None)


def run(marker, domain, sampled=False):
    if signal_number:
        signal.pthread_sigmask(signal.SIG_UNBLOCK if sampled else signal.SIG_BLOCK, {{signal_number}})
    started = time.perf_counter()
    for i in range(block):
        if marker is not None:
            marker.task_begin(domain, "step")
        step(i)
        if marker is not None:
            marker.task_end(domain)
    return (time.perf_counter() - started) / block


itt.resume()
for i in range(50):
    step(i)
times = {{name: [] for name in cases}}
for _ in range(rounds):
    for name, (marker, domain) in cases.items():
        times[name].append(run(marker, domain, name == "sampled"))
print(json.dumps(times))
"""


#: The child's modes: collector attached or not, and sampling or not.
MODES = {"collector attached (sampling off)": (True, False),
         "collector attached, sampling with timers at {hz} a second": (True, True),
         "no collector (ITT calls are no-ops)": (False, False)}
#: The signal the sampling child's collector samples with (AUTOITT_SAMPLE_SIGNAL), so that it can block it:
#: SIGPROF, one of the collector's own candidates.
SAMPLE_SIGNAL = 27


def measure(loop: str, rounds: int, block: int, everies: list, collector: bool, sample_hz: int = 0) -> dict:
    """{case: [mean step of each round's block, s]} from one child process; ``sample_hz``: the collector samples
    with timers at this rate (0: not at all)."""
    code = CHILD.format(loop=LOOPS[loop].format(sample=str(ROOT / "samples" / "torch_train.py")),
                        rounds=rounds, block=block, everies=everies, signal_number=SAMPLE_SIGNAL if sample_hz else 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    trace = None
    if collector:
        import tempfile

        from instrumenter.collector import environment

        trace = tempfile.TemporaryDirectory()
        env.update(environment(Path(trace.name), start_paused=False, sample_hz=sample_hz,
                               own_domains=["autoitt.train"]))
        if sample_hz:
            env.update(AUTOITT_SAMPLE_MECHANISM="timer", AUTOITT_SAMPLE_SIGNAL=str(SAMPLE_SIGNAL))
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    finally:
        if trace is not None:
            trace.cleanup()
    if done.returncode != 0:
        raise SystemExit(f"the {loop} loop failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(loop: str, mode: str, times: dict) -> None:
    bare = times["bare"]
    print(f"\n{loop}, {mode}: bare step {statistics.median(bare) * 1e6:.1f} µs (median of {len(bare)} blocks)")
    print(f"  {'case':<30}{'extra µs a step':>16}{'quartiles':>16}{'of the step':>13}")
    for name, values in times.items():
        if name == "bare":
            continue
        extra = [(value - base) * 1e6 for value, base in zip(values, bare)]
        q1, _, q3 = statistics.quantiles(extra)
        middle = statistics.median(extra)
        print(f"  {name:<30}{middle:>16.1f}{q1:>8.1f} to {q3:<5.1f}{middle / (statistics.median(bare) * 1e6):>12.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--block", type=int, default=200, help="steps of each case in a round")
    parser.add_argument("--only", choices=sorted(LOOPS))
    parser.add_argument("--every", default="20,50", help="the N of the operator cases, comma-separated")
    parser.add_argument("--sample-hz", type=int, help="the sampling process's timer rate (default: autoitt "
                                                      "profile's with timers, formats.SAMPLE_HZ_TIMER)")
    args = parser.parse_args()
    everies = [int(n) for n in args.every.split(",") if n]
    sys.path.insert(0, str(ROOT))
    from instrumenter.collector import library_path
    from instrumenter.collector.formats import SAMPLE_HZ_TIMER

    hz = args.sample_hz or SAMPLE_HZ_TIMER
    print(f"collector: {library_path()}")
    for loop in [args.only] if args.only else list(LOOPS):
        for mode, (collector, sampling) in MODES.items():
            report(loop, mode.format(hz=hz), measure(loop, args.rounds, args.block, everies, collector,
                                                     hz if sampling else 0))


if __name__ == "__main__":
    main()
