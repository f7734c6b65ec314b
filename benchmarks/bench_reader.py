"""Reading a long run's traces: events per second, peak memory and output sizes at 5 M, 20 M and 100 M events.

    .venv/bin/python benchmarks/bench_reader.py [--events 5M,20M,100M] [--operators 3] [--step-ns 1000] [--keep]

For each size, a synthetic trace is written in the collector's format
(``tests/trace_writer.py``: steps of 1 µs (``--step-ns``), each holding ``--operators``
PyTorch operator tasks, so ``2 + 2 * operators`` events a step, on one thread;
``--events 16M --operators 2000000 --step-ns 100000000`` is a run of four huge
steps, as LBFGS makes),
then two fresh processes run:

* read: what ``autoitt profile`` does after the run with the built-in backend
  (``BuiltinBackend.read``: the statistics pass, the timeline's window,
  trace.json, summary.json, steps.svg);
* report: what ``autoitt report DIR`` does (the saved summary, rendered).

Reported: wall time of each (and, for read, events per second), peak RSS of
each process (``wait4``), the trace file's size and those of the outputs. No
assertion: these are the figures the long-runs goals are checked against
(benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.trace_writer import TraceWriter, steps_with_operators  # noqa: E402

#: What the rewrite would have saved for a script ``train.py`` whose steps are ``step`` tasks on autoitt.train.
INSTRUMENTATION = """
from instrumenter.profile.instrumentation import Instrumentation
instrumentation = Instrumentation.from_json({"format": 1, "script": "train.py", "start_paused": False, "files": [{
    "path": "train.py", "relative": "train.py", "module": None, "runs": "train_itt.py",
    "outcome": "instrumented", "domain": "autoitt.train", "own_domains": [], "step_labels": ["step"],
    "runtime": ["instrumenter.runtime.collection"], "sha256": "", "regions": [],
    "line_map": {"copy_lines": 1, "original_lines": 1, "inserted": []}}]})
"""

READ = INSTRUMENTATION + """
import sys, time
from pathlib import Path
from instrumenter.builtin import BuiltinBackend
from instrumenter.profile.read_context import ReadContext
from instrumenter.profile.results import RunRecord
folder = Path(sys.argv[1])
record = RunRecord(script="train.py", copy="train_itt.py", args=[], backend="builtin", command=[], elapsed_s=1.0)
started = time.perf_counter()
summary = BuiltinBackend().read(folder, ReadContext.of(instrumentation, record))
print(time.perf_counter() - started, summary.events, summary.steps[0].count)
"""

REPORT = INSTRUMENTATION + """
import io, sys, time
from pathlib import Path
from rich.console import Console
from instrumenter.builtin import BuiltinBackend
folder = Path(sys.argv[1])
started = time.perf_counter()
backend = BuiltinBackend()
summary = backend.saved(folder)
backend.render(summary, Console(file=io.StringIO(), width=120), script="train.py", result_dir=folder,
               instrumentation=instrumentation)
print(time.perf_counter() - started)
"""


def _run(code: str, folder: Path):
    """(stdout words, wall seconds, peak RSS in MB) of ``code`` in a fresh interpreter."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code, str(folder)], cwd=ROOT, stdout=subprocess.PIPE)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("failed")
    return out.decode().split(), time.perf_counter() - started, usage.ru_maxrss / 1024


def _count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="5M,20M,100M", help="comma-separated event counts")
    parser.add_argument("--operators", type=int, default=3, help="operator tasks per step")
    parser.add_argument("--step-ns", type=int, default=1000, help="each step's duration (at least 2 ns an operator)")
    parser.add_argument("--keep", action="store_true", help="keep the generated folders (printed)")
    options = parser.parse_args(argv)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-reader-"))
    try:
        for events in (_count(e) for e in options.events.split(",")):
            folder = work / f"run-{events}"
            (folder / "itt").mkdir(parents=True)
            writer = TraceWriter(folder / "itt" / "itt-100.bin")
            steps_with_operators(writer, events // (2 + 2 * options.operators), options.operators,
                                 step_ns=options.step_ns)
            writer.close()
            (words, wall, rss) = _run(READ, folder)
            read_s, counted = float(words[0]), int(words[1])
            (report_words, report_wall, report_rss) = _run(REPORT, folder)
            size = {name: (folder / name).stat().st_size for name in ("trace.json", "summary.json", "steps.svg")}
            rows.append((counted, (folder / "itt" / "itt-100.bin").stat().st_size, read_s, wall, rss, size,
                         float(report_words[0]), report_wall, report_rss))
            if not options.keep:
                (folder / "itt" / "itt-100.bin").unlink()
    finally:
        if options.keep:
            print(f"kept in {work}")
        else:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    print(f"{'events':>12} {'trace MB':>9} {'read s':>7} {'M ev/s':>7} {'process s':>9} {'peak RSS MB':>11} "
          f"{'trace.json MB':>13} {'summary KB':>10} {'svg KB':>7} {'report s':>8} {'report RSS':>10}")
    for counted, trace, read_s, wall, rss, size, report_s, report_wall, report_rss in rows:
        print(f"{counted:>12,} {trace / 1e6:>9.0f} {read_s:>7.2f} {counted / read_s / 1e6:>7.1f} {wall:>9.2f} "
              f"{rss:>11.0f} {size['trace.json'] / 1e6:>13.1f} {size['summary.json'] / 1e3:>10.1f} "
              f"{size['steps.svg'] / 1e3:>7.1f} {report_wall:>8.2f} {report_rss:>10.0f}")
    print("read s: BuiltinBackend.read alone; process s: the whole process (interpreter and imports included);\n"
          "report s: the whole `autoitt report`-like process.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
