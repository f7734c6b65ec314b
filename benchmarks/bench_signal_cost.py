"""What CPU-time timer signals cost a step, by what the step does: whole blocks with and without them.

Plain Python, no autoitt: ``signal.setitimer(ITIMER_PROF, 10 ms)`` with an
empty Python handler, as the collector's timers sampled at 100 a second until 2026-12-03 (50 since).
Each round runs a block of steps with the timer armed and one without,
alternately, so drift hits both alike; the cost a step pays is the median
over rounds of the armed block's mean step minus the unarmed one's, and a
signal's cost is that divided by the signals a step took (the handler
counts them).

It also prints what an earlier version of this benchmark reported: the
mean of the steps a signal landed in minus the mean of the others in the
armed blocks. That figure is length-biased and must not be read as the
cost: a CPU-time timer is likelier to expire in a longer step, so the
steps it lands in were longer already (2026-12-03: 140 µs "a signal" on
the conv step, where the blocks give about 30). Steps: pure Python
arithmetic, a numpy matrix product, and the conv sample's training step
(torch, one thread; skipped without torch). Asserts nothing.

Usage: ``python benchmarks/bench_signal_cost.py [--rounds 30] [--block 300]``.
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


def measure(step, rounds: int, block: int) -> dict:
    """The step's cost of the signals (per step: median and quartiles over rounds), and the length-biased
    figure, from ``rounds`` pairs of blocks."""
    run(step, 50, signals=False)  # warm-up
    extra, plain, hit, quiet = [], [], [], []
    for _round in range(rounds):
        unarmed, _ = run(step, block, signals=False)
        armed, signalled = run(step, block, signals=True)
        plain.append(statistics.mean(unarmed))
        extra.append(statistics.mean(armed) - statistics.mean(unarmed))
        hit += [d for d, s in zip(armed, signalled) if s]
        quiet += [d for d, s in zip(armed, signalled) if not s]
    quartiles = statistics.quantiles(extra, n=4)
    return {"step": statistics.median(plain), "per_step": statistics.median(extra), "low": quartiles[0],
            "high": quartiles[2], "signals_per_step": len(hit) / (rounds * block),
            "biased": statistics.mean(hit) - statistics.mean(quiet) if hit and quiet else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=300, help="steps in each block")
    args = parser.parse_args()
    print(f"{'step':<24}{'step µs':>9}{'signals/step':>14}{'+µs a step (IQR)':>22}{'µs a signal':>13}"
          f"{'biased µs':>11}")
    for name, step in steps().items():
        found = measure(step, args.rounds, args.block)
        rate = found["signals_per_step"]
        each = f"{found['per_step'] / rate * 1e6:>13.0f}" if rate else f"{'-':>13}"
        biased = f"{found['biased'] * 1e6:>11.0f}" if found["biased"] is not None else f"{'-':>11}"
        spread = f"{found['per_step'] * 1e6:+.1f} ({found['low'] * 1e6:+.1f}, {found['high'] * 1e6:+.1f})"
        print(f"{name:<24}{found['step'] * 1e6:>9.0f}{rate:>14.3f}{spread:>22}{each}{biased}")


if __name__ == "__main__":
    main()
