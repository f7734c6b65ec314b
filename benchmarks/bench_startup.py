"""How quickly do ``autoitt --help`` and ``autoitt instrument --diff`` run, next to libcst alone?

Runs each command ``--runs`` times (default 10) in a fresh subprocess, after
one untimed warm-up run each (to fill the OS file cache), interleaving the
commands round by round so a change of machine load hits all of them alike:

  autoitt --help               the console script next to sys.executable
  python -c "import libcst"    what the CLI would pay if it imported libcst eagerly
  python -c "pass"             the interpreter's own start-up

and, for each of ``samples/*.py`` (typical training scripts of ~100 lines) and
a 30-line conv-net script (written to a temporary folder; fixed per-process
costs weigh most on a script this small):

  autoitt instrument SAMPLE --diff                       the whole command, as a user runs it
  python -c "import libcst; libcst.parse_module(src).code"   the yardstick: one libcst round trip

It prints best and median wall time of each, the ratio ``autoitt --help`` /
``import libcst`` (the CLI imports libcst only inside the commands that
rewrite, so it should stay well below 1) and, per sample, ``instrument --diff``
/ yardstick (goal: at most 1.3, medians). Nothing is asserted: wall times
depend on the machine; compare the ratios.

Every command runs from bytecode, as an installed autoitt does (pip compiles
it at install; an editable install writes it on first import): the warm-up
run fills a temporary PYTHONPYCACHEPREFIX (libcst's modules too), removed at
the end. ``--as-is`` runs with the environment unchanged instead: where
PYTHONDONTWRITEBYTECODE is set and autoitt's bytecode is stale (it is after
any edit), every run compiles autoitt's modules from source again (25-30 ms
here) while libcst's come from the bytecode written when it was installed.

Usage:  .venv/bin/python benchmarks/bench_startup.py [--runs N] [--no-samples] [--as-is]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence


CONV_NET = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(x.flatten(1))


data = TensorDataset(torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,)))
loader = DataLoader(data, batch_size=32, shuffle=True)
model = ConvNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
"""


def _autoitt() -> str:
    script = Path(sys.executable).with_name("autoitt")
    if not script.exists():
        sys.exit(f"no autoitt console script next to {sys.executable}; install the project (pip install -e .)")
    return str(script)


def _run(command: Sequence[str], env: Dict[str, str]) -> float:
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({completed.returncode}): {completed.stderr.decode(errors='replace')}")
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each command (default 10)")
    parser.add_argument("--no-samples", action="store_true", help="only the start-up commands")
    parser.add_argument("--as-is", action="store_true",
                        help="keep the environment's bytecode settings (default: every command from bytecode, "
                             "in a temporary PYTHONPYCACHEPREFIX, as installed)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")

    commands = {
        "autoitt --help": [_autoitt(), "--help"],
        'python -c "import libcst"': [sys.executable, "-c", "import libcst"],
        'python -c "pass"': [sys.executable, "-c", "pass"],
    }
    scratch = tempfile.TemporaryDirectory(prefix="bench_startup_")
    env = dict(os.environ)
    if not args.as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(scratch.name) / "pycache")
    samples = []
    if not args.no_samples:
        samples = sorted((Path(__file__).resolve().parent.parent / "samples").glob("*.py"))
        samples.append(Path(scratch.name) / "conv_net.py")
        samples[-1].write_text(CONV_NET)
    for sample in samples:
        commands[f"instrument {sample.name} --diff"] = [_autoitt(), "instrument", str(sample), "--diff"]
        commands[f"yardstick {sample.name}"] = [
            sys.executable, "-c", f"import libcst; libcst.parse_module(open({str(sample)!r}, 'rb').read()).code"]
    times: Dict[str, List[float]] = {label: [] for label in commands}
    for round_ in range(args.runs + 1):  # round 0 warms up
        for label, command in commands.items():
            elapsed = _run(command, env)
            if round_:
                times[label].append(elapsed)

    bytecode = "from bytecode" if not args.as_is else (
        "--as-is, PYTHONDONTWRITEBYTECODE set: stale bytecode is compiled again every run"
        if env.get("PYTHONDONTWRITEBYTECODE") else "--as-is")
    print(f"start-up wall time, {args.runs} runs each (python {sys.version.split()[0]}, {sys.executable}; "
          f"{bytecode})")
    print(f"{'command':<40} {'best ms':>9} {'median ms':>10}")
    for label, values in times.items():
        print(f"{label:<40} {min(values) * 1e3:>9.1f} {statistics.median(values) * 1e3:>10.1f}")
    help_, libcst_, bare = (times[label] for label in list(commands)[:3])
    print()
    print(f"autoitt --help / import libcst: best {min(help_) / min(libcst_):.2f}, "
          f"median {statistics.median(help_) / statistics.median(libcst_):.2f}")
    print(f"above bare interpreter start-up: autoitt --help +{(min(help_) - min(bare)) * 1e3:.1f} ms, "
          f"import libcst +{(min(libcst_) - min(bare)) * 1e3:.1f} ms (best)")
    for sample in samples:
        whole, yardstick = times[f"instrument {sample.name} --diff"], times[f"yardstick {sample.name}"]
        ratio = statistics.median(whole) / statistics.median(yardstick)
        print(f"instrument {sample.name} --diff / one libcst round trip, whole process: median {ratio:.2f} "
              f"(goal <= 1.3: {'PASS' if ratio <= 1.3 else 'FAIL'})")
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
