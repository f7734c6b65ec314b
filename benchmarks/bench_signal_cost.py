"""What one CPU-time timer signal costs the step it lands in, by what the step does.

Plain Python, no autoitt: ``signal.setitimer(ITIMER_PROF, 10 ms)`` with an
empty Python handler, as the collector's timers sample at 100 a second.
Each step of a loop is timed and marked as signalled or not (the handler
counts); the cost of a signal is the difference of the two kinds' means
(medians alongside). Steps: pure Python arithmetic, a numpy matrix product,
and the conv sample's training step (torch, one thread; skipped without
torch). In this VM the cost grows with the step's working set: what the
interruption evicts is refilled after it (benchmarks/README.md). Asserts
nothing.

Usage: ``python benchmarks/bench_signal_cost.py [--steps 6000]``.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_small_ops import CONV_SETUP, ROOT  # noqa: E402  (the conv loop's model and data)

_hits = [0]


def _handler(*_args) -> None:
    _hits[0] += 1


def run(step, steps: int, signals: bool):
    """(durations, signalled) of ``steps`` calls of ``step``, with the timer armed or not."""
    previous = signal.signal(signal.SIGPROF, _handler)
    if signals:
        signal.setitimer(signal.ITIMER_PROF, 0.01, 0.01)
    durations, signalled = [], []
    try:
        for i in range(steps):
            before = _hits[0]
            started = time.perf_counter()
            step(i)
            durations.append(time.perf_counter() - started)
            signalled.append(_hits[0] != before)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    return durations, signalled


def steps() -> dict:
    import numpy as np

    matrix = np.random.default_rng(0).random((160, 160))

    def pure(_i):
        total = 0
        for n in range(6000):
            total += n * n

    def numpy_product(_i):
        product = matrix
        for _ in range(3):
            product = product @ matrix
            product /= product.max()

    found = {"pure Python": pure, "numpy matrix product": numpy_product}
    try:
        import torch
    except ImportError:
        return found
    torch.manual_seed(0)
    torch.set_num_threads(1)
    space = {"torch": torch}
    exec(CONV_SETUP.format(sample=str(ROOT / "samples" / "torch_train.py")), space)
    model, criterion, optimizer, batches = (space[k] for k in ("model", "criterion", "optimizer", "batches"))

    def conv(i):
        data, target = batches[i % len(batches)]
        optimizer.zero_grad()
        criterion(model(data), target).backward()
        optimizer.step()

    found["conv sample (torch)"] = conv
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6000)
    args = parser.parse_args()
    print(f"{'step':<24}{'step µs':>9}{'signalled':>11}{'+µs (mean)':>12}{'+µs (median)':>14}")
    for name, step in steps().items():
        run(step, 50, signals=False)  # warm-up
        plain, _ = run(step, args.steps, signals=False)
        durations, signalled = run(step, args.steps, signals=True)
        hit = [d for d, s in zip(durations, signalled) if s]
        quiet = [d for d, s in zip(durations, signalled) if not s]
        if not hit or not quiet:
            print(f"{name:<24}{statistics.median(plain) * 1e6:>9.0f}{len(hit):>11}   (too few of a kind)")
            continue
        print(f"{name:<24}{statistics.median(plain) * 1e6:>9.0f}{len(hit):>11}"
              f"{(statistics.mean(hit) - statistics.mean(quiet)) * 1e6:>12.0f}"
              f"{(statistics.median(hit) - statistics.median(quiet)) * 1e6:>14.0f}")


if __name__ == "__main__":
    main()
