"""What recording PyTorch operators costs: the built-in collector vs torch.profiler, side by side.

Runs the training loop of samples/torch_train.py (its model and data, more
epochs) in fresh processes, alternating between four set-ups, and times only
the loop (imports and warm-up excluded):

* ``baseline``: the plain loop;
* ``emit_itt+collector``: inside ``torch.autograd.profiler.emit_itt()`` with
  autoitt's collector loaded (what ``autoitt profile`` does);
* ``emit_itt`` alone: the same with no collector (ITT calls are no-ops), to
  show how much is PyTorch's own RecordFunction cost;
* ``torch.profiler``: inside ``torch.profiler.profile(activities=[CPU])``.

It prints each set-up's median loop time and the extra time over baseline,
and the ratio (collector extra) / (torch.profiler extra); the target is at
most 1/3. Usage: ``python benchmarks/bench_overhead.py [--rounds 5] [--epochs 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "torch_train.py"
MODES = ("baseline", "emit_itt+collector", "emit_itt", "torch.profiler")


def worker(mode: str, epochs: int) -> None:
    import contextlib

    import torch
    from torch.utils.data import DataLoader

    sample = runpy.run_path(str(SAMPLE), run_name="sample")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(sample["SyntheticImageDataset"](sample["TRAIN_SAMPLES"], seed=0),
                        batch_size=sample["BATCH_SIZE"], shuffle=False)
    model = sample["ConvNet"]()
    criterion = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train(n):
        for _ in range(n):
            for data, target in loader:
                optimizer.zero_grad()
                loss = criterion(model(data), target)
                loss.backward()
                optimizer.step()

    if mode.startswith("emit_itt"):
        context = torch.autograd.profiler.emit_itt()
    elif mode == "torch.profiler":
        context = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    else:
        context = contextlib.nullcontext()
    train(1)  # warm-up: first-iteration allocations and oneDNN primitive creation
    started = time.perf_counter()
    with context:  # entering and leaving count: torch.profiler does its processing on exit
        train(epochs)
    elapsed = time.perf_counter() - started
    print(json.dumps({"mode": mode, "seconds": elapsed}))


def run(mode: str, epochs: int, trace_dir: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    if mode == "emit_itt+collector":
        sys.path.insert(0, str(ROOT))
        from instrumenter.collector import environment

        env.update(environment(trace_dir, start_paused=False))
    done = subprocess.run([sys.executable, __file__, "--worker", mode, "--epochs", str(epochs)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--worker", choices=MODES)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.epochs)
        return
    times = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(args.rounds):
            for mode in MODES:  # interleaved, so drift on a noisy machine hits every set-up alike
                times[mode].append(run(mode, args.epochs, Path(tmp) / f"r{round_number}"))
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    base = medians["baseline"]
    steps = args.epochs * 8
    print(f"PyTorch sample loop, {args.epochs} epochs x 8 steps = {steps} steps, median of {args.rounds} rounds")
    print(f"{'set-up':<22}{'loop s':>10}{'extra s':>10}{'extra/step':>14}")
    for mode in MODES:
        extra = medians[mode] - base
        print(f"{mode:<22}{medians[mode]:>10.3f}{extra:>10.3f}{extra / steps * 1e6:>11.0f} µs")
    collector_extra = medians["emit_itt+collector"] - base
    profiler_extra = medians["torch.profiler"] - base
    ratio = collector_extra / profiler_extra if profiler_extra > 0 else float("inf")
    print(f"collector extra / torch.profiler extra = {ratio:.2f} (target <= 0.33): {'PASS' if ratio <= 1 / 3 else 'FAIL'}")
    print(f"collector alone (emit_itt+collector - emit_itt) = "
          f"{medians['emit_itt+collector'] - medians['emit_itt']:.3f} s")


if __name__ == "__main__":
    main()
