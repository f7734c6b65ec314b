"""Instructions a step, counted: the conv loop with and without the collector, under callgrind.

Wall-clock rounds on these VMs cannot show a few percent (runs of one script spread with a coefficient of
variation of 8.5 %); instruction counts can, for what is instructions. ``bench_small_ops.py``'s conv loop,
as ``autoitt instrument --torch-ops off`` writes it, runs at ``--short`` and ``--long`` steps under
``valgrind --tool=callgrind``, plain (its ITT calls are no-ops) and with the collector attached (sampling
off: its recording only). The difference of the two lengths, over their steps, is a step's count with
start-up cancelled. Made steady: OpenBLAS's idle thread stopped (its spin moved the counts by 200,000
instructions a step), ``PYTHONHASHSEED=0``, no ASLR (``setarch -R``).

Usage: ``python benchmarks/bench_instructions.py [--rounds 2] [--short 100] [--long 300]`` (about 4 minutes
a round on 2 cores). Prints each round's instructions a step, both ways, and the collector's ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_small_ops import CONV  # noqa: E402
from instrumenter.collector import library_path  # noqa: E402

STEADY = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def counted(folder: Path, steps: int, collector: bool) -> int:
    """Instructions callgrind counted in a whole run of the copy of ``steps`` steps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    env.update(STEADY, BENCH_OUT=str(folder / f"out-{steps}-{collector}"), PYTHONPATH=str(ROOT))
    if collector:
        env.update(INTEL_LIBITTNOTIFY64=str(library_path()), AUTOITT_TRACE_DIR=str(folder / f"itt-{steps}"),
                   AUTOITT_SAMPLE_HZ="0")
    done = subprocess.run(["setarch", "-R", "valgrind", "--tool=callgrind",
                           f"--callgrind-out-file={folder / f'cg-{steps}-{collector}'}", sys.executable,
                           str(folder / f"conv{steps}_itt.py")], env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or not found:
        raise SystemExit(f"callgrind run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--long", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for steps in (args.short, args.long):
            script = folder / f"conv{steps}.py"
            script.write_text(CONV.format(sample=str(ROOT / "samples" / "torch_train.py"), steps=steps, warm=10))
            subprocess.run([sys.executable, "-m", "instrumenter", "instrument", str(script), "--torch-ops", "off",
                            "-o", str(folder / f"conv{steps}_itt.py")], check=True, capture_output=True, cwd=ROOT)
        print("round   plain instructions/step   with the collector   ratio")
        for round_number in range(1, args.rounds + 1):
            runs = [(steps, collector) for collector in (False, True) for steps in (args.short, args.long)]
            with ThreadPoolExecutor(2) as pool:  # callgrind runs one thread at a time: two runs on two cores
                counts = dict(zip(runs, pool.map(lambda run: counted(folder, *run), runs)))
            per = [(counts[(args.long, c)] - counts[(args.short, c)]) / (args.long - args.short) for c in (False, True)]
            print(f"{round_number:>5}   {per[0]:>23,.0f}   {per[1]:>18,.0f}   {per[1] / per[0]:.4f}")


if __name__ == "__main__":
    main()
