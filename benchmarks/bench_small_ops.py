"""What a user's step costs under ``autoitt profile``: a small-operator loop and the conv sample, interleaved.

Two unmodified training scripts, written to a temporary folder:

* ``small_ops``: a 12-layer MLP of width 64 at batch 8 with Adam, one thread:
  about 300 PyTorch operators a step of a few hundred microseconds, where a
  per-operator cost shows most;
* ``conv``: samples/torch_train.py's model and data (large operators).

Each script times its own steady steps (the loop from its step ``WARM`` on:
imports, start-up and the first steps' allocations are left out) and writes
the mean step time to ``$BENCH_OUT``. Every round runs each set-up once, in
this order, so drift on a noisy machine hits them alike:

* ``python``: the script as it is;
* ``copy``: ``autoitt instrument``'s copy run by plain python (no collector:
  its ITT calls are no-ops), once per ``--torch-ops`` value;
* ``profile``: ``autoitt profile`` with its defaults;
* ``profile --torch-ops X`` for each value; the default and ``off`` with the
  sampler's perf mechanism forced (``AUTOITT_SAMPLE_MECHANISM=perf``: what
  runs where an interruption is cheap, and what ran here before it was
  measured); ``all``/``off`` with ``--sample-rate 0``;
* ``profile @ TREE``: with ``--against TREE``, ``autoitt profile`` from another
  checkout (an earlier commit's ``git worktree``, built in place), so that a
  change is measured against what it changes in the same rounds.

It prints each set-up's median step time and its ratio to ``python``'s (the
median of each round's own ratio, and their range), then where the extra time
of recording every operator goes, per step and per operator, from the
differences of those medians. ``--raw FILE`` also writes every round's step
times (JSON: loop -> set-up -> seconds, one per round; rounds in order), and
``--pool FILE...`` prints the tables of several such batches together: this
VM's processes differ by several percent, and a median ratio of 1.05 is only
told from 1.04 over many rounds.
Usage: ``python benchmarks/bench_small_ops.py [--rounds 5] [--steps 1500] [--only conv] [--setups A,B]
[--against TREE] [--raw FILE]``,
``python benchmarks/bench_small_ops.py --pool FILE...``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AUTOITT = [sys.executable, "-m", "instrumenter"]
WARM = 50

#: The two loops' models and data, after ``import torch`` (bench_step_parts.py runs the same ones in one process).
SMALL_OPS_SETUP = """\
layers = []
for _ in range(12):
    layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 64), torch.randn(8, 64)
"""
CONV_SETUP = """\
import runpy
from torch.utils.data import DataLoader
sample = runpy.run_path({sample!r}, run_name="sample")
loader = DataLoader(sample["SyntheticImageDataset"](sample["TRAIN_SAMPLES"], seed=0),
                    batch_size=sample["BATCH_SIZE"], shuffle=False)
model = sample["ConvNet"]()
criterion = torch.nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
batches = list(loader)
"""
_HEAD = """\
import os
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
"""

SMALL_OPS = _HEAD + SMALL_OPS_SETUP + """\
started = None
for step in range({steps}):
    if step == {warm}:
        started = time.perf_counter()
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
with open(os.environ["BENCH_OUT"], "w") as out:
    out.write(str((time.perf_counter() - started) / ({steps} - {warm})))
"""

CONV = _HEAD + CONV_SETUP + """\
started = None
for step in range({steps}):
    if step == {warm}:
        started = time.perf_counter()
    data, target = batches[step % len(batches)]
    optimizer.zero_grad()
    loss = criterion(model(data), target)
    loss.backward()
    optimizer.step()
with open(os.environ["BENCH_OUT"], "w") as out:
    out.write(str((time.perf_counter() - started) / ({steps} - {warm})))
"""

TORCH_OPS = ("all", "sampled", "off")


PERF = {"AUTOITT_SAMPLE_MECHANISM": "perf"}


def setups(against: tuple = ()) -> list:
    """(name, kind, options, environment): ``kind`` is ``python``, ``copy`` or ``profile``; ``against``: other
    checkouts of autoitt (built in place) whose ``autoitt profile`` defaults run too, as ``profile @ TREE``."""
    out = [("python", "python", (), {})]
    out += [(f"copy --torch-ops {ops}", "copy", ("--torch-ops", ops), {}) for ops in TORCH_OPS]
    out += [("profile", "profile", (), {})]
    out += [(f"profile --torch-ops {ops}", "profile", ("--torch-ops", ops), {}) for ops in TORCH_OPS]
    # the sampler's other mechanism, forced: perf's cpu-clock at 1 kHz (the default where it is cheap)
    out += [("profile, perf sampling", "profile", (), PERF)]
    out += [("profile --torch-ops off, perf sampling", "profile", ("--torch-ops", "off"), PERF)]
    out += [(f"profile --torch-ops {ops} --sample-rate 0", "profile", ("--torch-ops", ops, "--sample-rate", "0"), {})
            for ops in ("all", "off")]
    out += [("profile --sample-rate 0", "profile", ("--sample-rate", "0"), {})]  # the defaults' sampler's share
    # other rates: the slope of the step's time against the rate is what one sample costs it
    out += [(f"profile --sample-rate {hz}", "profile", ("--sample-rate", str(hz)), {}) for hz in (1, 100, 200)]
    # another tree's autoitt first on the path: the launcher, its runtime package and its collector are that tree's
    out += [(f"profile @ {tree}", "profile", (), {"PYTHONPATH": str(tree)}) for tree in against]
    return out


def operators_per_step(folder: Path) -> float:
    """PyTorch tasks per step in a ``--torch-ops all`` run's summary.json."""
    summary = json.loads((folder / "summary.json").read_text())
    ops = sum(task["count"] for task in summary["tasks"] if task["domain"] == "PyTorch")
    return ops / sum(step["count"] for step in summary["steps"])


def breakdown(median: dict, ops: float) -> list:
    """Where the extra time of ``profile --torch-ops all`` goes, from the medians of the set-ups (seconds a
    step): (part, µs a step, µs an operator or None)."""
    torch_path = median["copy --torch-ops all"] - median["copy --torch-ops off"]
    collector = (median["profile --torch-ops all --sample-rate 0"] - median["profile --torch-ops off --sample-rate 0"]
                 - torch_path)
    return [
        ("markers (a step task, through the runtime; no collector)", median["copy --torch-ops off"] - median["python"],
         None),
        ("PyTorch's ITT path (RecordFunction, emit_itt's callbacks into no-op ITT)", torch_path, torch_path / ops),
        ("the collector recording each operator (begin/end, string handle)", collector, collector / ops),
        ("the collector for the step tasks, and its start (no operators, no sampling)",
         median["profile --torch-ops off --sample-rate 0"] - median["copy --torch-ops off"], None),
        ("the sampler at 1000 Hz, perf's cpu-clock", median["profile --torch-ops off, perf sampling"]
         - median["profile --torch-ops off --sample-rate 0"], None),
        ("the sampler with the mechanism chosen here", median["profile --torch-ops off"]
         - median["profile --torch-ops off --sample-rate 0"], None),
    ]


def median_interval(values: list, z: float = 1.96) -> tuple:
    """A distribution-free 95 % interval of the median of ``values`` (the order statistics of ranks
    n/2 ± z·√n/2, as ``autoitt compare`` reads its intervals); (None, None) under 6 values, too few for one."""
    n = len(values)
    if n < 6:
        return None, None
    ordered = sorted(values)
    half = z * n ** 0.5 / 2
    return ordered[max(int(n / 2 - half), 0)], ordered[min(int(n / 2 + half + 0.5), n - 1)]


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}


def run(folder: Path, script: str, kind: str, options: tuple, extra: dict, tag: str) -> float:
    out = folder / f"{tag}.out"
    env = dict(clean_env(), BENCH_OUT=str(out), **extra)
    if kind == "python":
        command = [sys.executable, script]
    elif kind == "copy":
        copy = f"{Path(script).stem}_{tag}_itt.py"
        subprocess.run(AUTOITT + ["instrument", *options, "-o", copy, "--force", script], cwd=folder, env=env,
                       check=True, capture_output=True)
        command = [sys.executable, copy]
    else:
        command = AUTOITT + ["profile", *options, "-r", f"results_{tag}", script]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return float(out.read_text())


def report(times: dict, ops: dict) -> None:
    """Prints each loop's table from ``times`` (loop -> set-up -> step seconds, one per round, ``python``'s
    among them) and, where every set-up ran and ``ops`` has the loop's operators a step, the breakdown."""
    for name, by_setup in times.items():
        python = by_setup["python"]
        print(f"\n{name}: median step of {len(python)} interleaved rounds (ratio: the round's own / python's)")
        print(f"{'set-up':<40}{'step µs':>10}{'ratio':>8}{'ratio range':>14}{'95 % of the median':>20}")
        for setup, values in by_setup.items():
            ratios = [v / p for v, p in zip(values, python)]
            low, high = median_interval(ratios)
            # three decimals: the targets (1.05x, 1.10x) are told apart from what lies next to them
            print(f"{setup:<40}{statistics.median(values) * 1e6:>10.1f}{statistics.median(ratios):>8.3f}"
                  f"{min(ratios):>8.2f}-{max(ratios):.2f}" + (f"{low:>14.3f}-{high:.3f}" if low else ""))
        median = {setup: statistics.median(values) for setup, values in by_setup.items()}
        if name not in ops or any(setup[0] not in median for setup in setups()):  # (not the --against ones)
            continue  # the breakdown needs every set-up
        print(f"\n{name}: {ops[name]:.0f} PyTorch operator tasks a step; the extra time of every operator recorded")
        for part, per_step, per_op in breakdown(median, ops[name]):
            print(f"  {part:<78}{per_step * 1e6:>8.1f} µs a step" + (f"{per_op * 1e9:>8.0f} ns an operator"
                                                                      if per_op is not None else ""))


def pooled(paths: list) -> dict:
    """The rounds of several ``--raw`` files, together: per loop, the set-ups every file ran (a round's values
    stay paired with its own ``python``)."""
    batches = [json.loads(Path(path).read_text()) for path in paths]
    out: dict = {}
    for loop in {name for batch in batches for name in batch}:
        having = [batch[loop] for batch in batches if loop in batch]
        common = [setup for setup in having[0] if all(setup in batch for batch in having)]
        # a batch stopped in a round has fewer values in its later set-ups: its rounds all set-ups finished
        rounds = [min(len(batch[setup]) for setup in common) for batch in having]
        out[loop] = {setup: [v for batch, n in zip(having, rounds) for v in batch[setup][:n]] for setup in common}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500, help="steps of each loop")
    parser.add_argument("--only", choices=("small_ops", "conv"))
    parser.add_argument("--setups", help="only these set-ups (comma-separated names as printed; python always "
                                         "runs), for more rounds of the ones that matter in the same time")
    parser.add_argument("--against", type=Path, nargs="+", default=[], metavar="TREE",
                        help="also run `autoitt profile` from these checkouts (built in place, e.g. a `git worktree` of "
                             "an earlier commit), interleaved: set-up `profile @ TREE`, always run")
    parser.add_argument("--raw", type=Path, help="also write every round's step times here (JSON)")
    parser.add_argument("--pool", nargs="+", metavar="RAW", help="run nothing: print the tables of these --raw "
                                                               "files' rounds together")
    args = parser.parse_args()
    if args.pool:
        report(pooled(args.pool), {})
        return
    scripts = {
        "small_ops": SMALL_OPS.format(steps=args.steps, warm=WARM),
        # from step 20: past the steps 2-11 that record their operators for the timeline (a run's start); as
        # many steps as the small loop, so that the sampler's first scans (its start) weigh as little
        "conv": CONV.format(steps=args.steps, warm=20,
                            sample=str(ROOT / "samples" / "torch_train.py")),
    }
    if args.only:
        scripts = {args.only: scripts[args.only]}
    against = tuple(tree.resolve() for tree in args.against)
    for tree in against:
        if not (tree / "instrumenter" / "__main__.py").is_file():
            parser.error(f"--against {tree}: not a checkout of autoitt")
    chosen = setups(against)
    if args.setups:
        wanted = {"python", *(name.strip() for name in args.setups.split(",")), *(f"profile @ {t}" for t in against)}
        unknown = wanted - {setup[0] for setup in chosen}
        if unknown:
            parser.error(f"unknown set-up(s) {sorted(unknown)}; choose from {[setup[0] for setup in chosen]}")
        chosen = [setup for setup in chosen if setup[0] in wanted]
    times = {name: {setup[0]: [] for setup in chosen} for name in scripts}  # loop -> set-up -> one per round
    ops = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, text in scripts.items():
            (folder / f"{name}.py").write_text(text)
        for round_number in range(args.rounds):
            for name in scripts:
                for index, (setup, kind, options, extra) in enumerate(chosen):
                    tag = f"{name}_r{round_number}s{index}"
                    times[name][setup].append(run(folder, f"{name}.py", kind, options, extra, tag))
                    if setup == "profile --torch-ops all" and name not in ops:
                        ops[name] = operators_per_step(folder / f"results_{tag}")
            print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
            if args.raw:  # after every round: a batch stopped early keeps what it measured
                args.raw.write_text(json.dumps(times, indent=1))
    report(times, ops)


if __name__ == "__main__":
    main()
