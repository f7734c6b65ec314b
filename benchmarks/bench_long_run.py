"""A long run with the built-in backend: how the time, memory and files of a profile grow with its events.

    .venv/bin/python benchmarks/bench_long_run.py [--tiny-steps N] [--torch-steps N]

Two generated scripts, each profiled with ``autoitt profile --backend builtin``:

* tiny: ``for i in range(N):  # autoitt: step`` around an addition, two task
  events per step (the issue's 2.5 M-step case is ``--tiny-steps 2500000``);
* ops: N steps of a ``torch.nn.Linear`` forward, backward and SGD step
  under ``emit_itt``, about 128 task events per step (operators included).

Reported per run: task events, the whole command's wall time (the run plus
the summary), autoitt's peak RSS and that of the training process (both from
``wait4``), the sizes of trace.json, summary.json and steps.svg, and the wall
time of ``autoitt report`` on the result folder. No assertion: these are the
figures issue 10's goals are checked against.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = "x = 0\nfor i in range({steps}):  # autoitt: step\n    x += i\nprint(x)\n"
TORCH = ("import torch\nmodel = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
         "for i in range({steps}):\n    loss = model(torch.ones(4)).sum()\n    loss.backward()\n    opt.step()\n")


def _timed(command, cwd):
    """(wall seconds, peak RSS in MB of the process itself, of its largest child, its stdout)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return wall, usage.ru_maxrss / 1024, out


def _profile(name: str, script: str, work: Path) -> dict:
    (work / f"{name}.py").write_text(script)
    folder = work / f"{name}-result"
    command = [sys.executable, "-m", "instrumenter", "profile", "--json", "--backend", "builtin", "-r", str(folder),
               f"{name}.py"]
    wall, rss, out = _timed(command, work)
    summary = json.loads(out)
    report_wall, report_rss, _ = _timed([sys.executable, "-m", "instrumenter", "report", "--json", str(folder)], work)
    size = {f: (folder / f).stat().st_size for f in ("trace.json", "summary.json", "steps.svg")}
    return {"run": name, "events": summary["events"], "steps": sum(s["count"] for s in summary["steps"]),
            "wall_s": wall, "peak_rss_mb": rss, "trace_mb": size["trace.json"] / 1e6,
            "summary_kb": size["summary.json"] / 1e3, "svg_kb": size["steps.svg"] / 1e3,
            "report_s": report_wall, "report_rss_mb": report_rss, "window": summary.get("trace_window")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny-steps", type=int, default=250_000)
    parser.add_argument("--torch-steps", type=int, default=40_000)
    options = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        rows.append(_profile("tiny", TINY.format(steps=options.tiny_steps), Path(work)))
        rows.append(_profile("ops", TORCH.format(steps=options.torch_steps), Path(work)))
    print(f"{'run':6} {'events':>10} {'steps':>9} {'wall s':>8} {'peak RSS MB':>12} {'trace MB':>9} "
          f"{'summary KB':>11} {'svg KB':>7} {'report s':>9}")
    for r in rows:
        print(f"{r['run']:6} {r['events']:>10,} {r['steps']:>9,} {r['wall_s']:>8.1f} {r['peak_rss_mb']:>12.0f} "
              f"{r['trace_mb']:>9.1f} {r['summary_kb']:>11.1f} {r['svg_kb']:>7.1f} {r['report_s']:>9.2f}")
        if r["window"]:
            print(f"       {r['window']}")
    print("(peak RSS: the largest of autoitt and the training process, as wait4 reports for the command)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
