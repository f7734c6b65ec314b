"""What does the collector's CPU-time stack sampling cost a PyTorch training loop?

A small conv-net training loop (Conv2d+BatchNorm+ReLU+Linear, Adam, batch
16x3x32x32, 2 intra-op threads, about 1 ms of pure Python per step, each step an
``autoitt.train`` task) runs under the collector, once per rate, in separate
processes alternating the rates round after round (the rate is read when the
collector loads, so one process cannot switch it).  For each run: the median
step time after a warm-up, the process's CPU time, and from its
``samples-<pid>.bin`` the samples, the time spent in the signal handler (the
collector's own count, TSC) and the file's bytes.

Prints, per rate, the step-time ratio against the run without sampling of the
same round (median and range over the rounds), the handler's cost per sample,
the extra CPU time per sample (CPU time of the run minus that of the round's run
without sampling, over its samples: handler, signal delivery and the scanner
thread together; noisy), samples per second per busy thread and bytes per
sample.  Asserts nothing.  CPU time (of every thread, over the measured steps) is
less sensitive than step time to other processes on the machine.

Usage:  .venv/bin/python benchmarks/bench_sampling.py [--rounds 5] [--steps 200] [--rates 0,1000,100]

A rate ending in ``t`` (``1000t``) forces the fallback mechanism, per-thread
CPU-time timers, instead of perf_event_open. A rate ending in ``n`` (``0n``)
runs without counters per task (the steps are not an own domain's tasks): ``0``
against ``0n`` is what the counters cost (a clock read and a ``getrusage`` at
each step's begin and end).

``--signal-cost`` measures instead what one sampling interruption costs the
sampled thread with an empty handler (a C loop of register arithmetic, timed
in its own CPU time, compiled here with gcc): a perf cpu-clock overflow
signal, a POSIX CPU-time timer's signal, and a signal sent to itself.
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
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from instrumenter.builtin.samples.samplefile import read_sample_dir  # noqa: E402
from instrumenter.collector import environment  # noqa: E402

TRAIN = r"""
import json, os, sys, time
import torch
import ittapi.compat as itt

torch.manual_seed(0)
torch.set_num_threads(2)
steps, warmup = int(sys.argv[1]), 20
train = itt.domain_create("autoitt.train")
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(16 * 32 * 32, 10))
optimizer = torch.optim.Adam(model.parameters())
x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))

def py_burn():
    total = 0
    for i in range(20000):
        total += i * i
    return total

times = []
for step in range(warmup + steps):
    if step == warmup:
        cpu0, mono0 = time.process_time(), time.monotonic_ns()
    t0 = time.perf_counter()
    itt.task_begin(train, "step")
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    py_burn()
    itt.task_end(train)
    times.append(time.perf_counter() - t0)
print(json.dumps({"step": times[warmup:], "cpu": time.process_time() - cpu0, "window": [mono0, time.monotonic_ns()]}))
"""


SIGNAL_COST_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static volatile long signals;
static void handler(int s, siginfo_t *si, void *uc) { (void)s; (void)si; (void)uc; signals++; }
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv)
{
    /* argv: mode (none|perf|timer|self) rate */
    const char *mode = argv[1];
    long hz = atol(argv[2]);
    int tid = (int)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGURG, &sa, 0);
    if (!strcmp(mode, "perf")) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a; a.type = PERF_TYPE_SOFTWARE; a.config = PERF_COUNT_SW_CPU_CLOCK;
        a.sample_period = 1000000000 / hz; a.exclude_kernel = 1; a.exclude_hv = 1;
        int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
        struct f_owner_ex owner = {F_OWNER_TID, tid};
        if (fd < 0 || fcntl(fd, F_SETOWN_EX, &owner) || fcntl(fd, F_SETSIG, SIGURG)
            || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC)) { perror("perf_event_open"); return 1; }
    } else if (!strcmp(mode, "timer")) {
        timer_t timer;
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID; ev.sigev_signo = SIGURG; ev._sigev_un._tid = tid;
        struct itimerspec its = {{0, 1000000000 / hz}, {0, 1000000000 / hz}};
        if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &timer) || timer_settime(timer, 0, &its, 0)) { perror("timer"); return 1; }
    }
    double t0 = cpu();
    volatile double x = 0;
    if (!strcmp(mode, "self")) {
        for (long i = 0; i < 200000; i++) syscall(SYS_tgkill, getpid(), tid, SIGURG);
    } else {
        for (long i = 0; i < 400000000; i++) x += i * 0.5;
    }
    printf("%.6f %ld\n", cpu() - t0, signals);
    return 0;
}
"""


def signal_cost(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "signal_cost"
        (Path(tmp) / "signal_cost.c").write_text(SIGNAL_COST_C)
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(Path(tmp) / "signal_cost.c")], check=True)

        def measure(mode: str, hz: int) -> List[float]:
            out = subprocess.run([str(binary), mode, str(hz)], capture_output=True, text=True, check=True).stdout
            seconds, signals = out.split()
            return [float(seconds), int(signals)]

        configs = [("none", 0), ("perf", 1000), ("perf", 10000), ("timer", 1000)]
        found: Dict[Tuple[str, int], List[List[float]]] = {c: [] for c in configs}
        for _ in range(rounds):
            for config in configs:
                found[config].append(measure(*config))
        base = statistics.median(s for s, _ in found[("none", 0)])
        print(f"loop alone: {base:.3f} s of CPU")
        for mode, hz in configs[1:]:
            extra = [(s - base) / n * 1e6 for s, n in found[(mode, hz)] if n]
            signals = statistics.median(n for _, n in found[(mode, hz)])
            print(f"  {mode:>5} at {hz:>5} Hz: {signals:>7.0f} signals, {statistics.median(extra):6.1f} us of the "
                  f"thread's CPU each (range {min(extra):.1f}-{max(extra):.1f}), "
                  f"{statistics.median(s for s, _ in found[(mode, hz)]) / base - 1:+.1%} CPU")
        self_us = [s / 200000 * 1e6 for s, _ in (measure("self", 0) for _ in range(rounds))]
        print(f"  a signal sent to itself (tgkill + empty handler + sigreturn): {statistics.median(self_us):.2f} us")


def run(rate: str, steps: int, work: Path) -> Dict:
    traces = work / f"traces-{rate}-{len(list(work.iterdir()))}"
    env = {**os.environ, **environment(traces, start_paused=False), "AUTOITT_SAMPLE_HZ": rate.rstrip("tn")}
    if rate.endswith("n"):
        env["AUTOITT_OWN_DOMAINS"] = "not.a.domain"  # no own task: no counters either
    if rate.endswith("t"):
        env["AUTOITT_SAMPLE_MECHANISM"] = "timer"
    done = subprocess.run([sys.executable, "-c", TRAIN, str(steps)], env=env, capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout)
    result["median_ms"] = statistics.median(result["step"]) * 1e3
    result["cpu_ms"] = result["cpu"] / len(result["step"]) * 1e3
    files = read_sample_dir(traces)
    start, end = result["window"]
    result["samples"] = sum(int(((f.ns >= start) & (f.ns <= end)).sum()) for f in files)
    result["handler_ns"] = sum(c.handler_ns for f in files for c in f.counts.values())
    result["all_samples"] = sum(len(f) for f in files)
    result["dropped"] = sum(f.dropped for f in files)
    result["bytes"] = sum(f.path.stat().st_size for f in files)
    result["mechanism"] = files[0].mechanism if files else "off"
    if files and len(files[0]):
        f = files[0]
        seconds = (int(f.ns.max()) - int(f.ns.min())) / 1e9
        per_thread = [int((f.tid == t).sum()) for t in set(f.tid.tolist())]
        result["busiest_thread_hz"] = max(per_thread) / seconds if seconds else 0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rates", default="0,1000,100",
                        help="comma-separated; 0 (no sampling) is the baseline; 1000t: timers instead of perf")
    parser.add_argument("--signal-cost", action="store_true", help="measure one interruption's cost instead")
    args = parser.parse_args()
    if args.signal_cost:
        signal_cost(args.rounds)
        return
    rates = args.rates.split(",")
    if "0" not in rates:
        rates.insert(0, "0")
    results: Dict[str, List[Dict]] = {r: [] for r in rates}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for k in range(args.rounds):
            order = rates[k % len(rates):] + rates[:k % len(rates)]
            for rate in order:
                results[rate].append(run(rate, args.steps, work))
            line = "  ".join(f"{r} Hz {results[r][-1]['median_ms']:.2f} ms" for r in rates)
            print(f"round {k + 1}: median step  {line}", flush=True)
    print()
    base = results["0"]
    print(f"{'rate':>6} {'mech':>5} {'step ms':>8} {'step ratio [range]':>21} {'CPU ms/step':>12} "
          f"{'CPU ratio [range]':>20} {'handler':>9} {'CPU/sample':>11} {'Hz busiest':>10} {'B/sample':>9} "
          f"{'dropped':>7}")
    for rate in rates:
        runs = results[rate]
        ratios = [r["median_ms"] / b["median_ms"] for r, b in zip(runs, base)]
        cpu_ratios = [r["cpu_ms"] / b["cpu_ms"] for r, b in zip(runs, base)]
        handler = sum(r["handler_ns"] for r in runs) / max(sum(r["all_samples"] for r in runs), 1)
        extra = [(r["cpu_ms"] - b["cpu_ms"]) * len(r["step"]) / r["samples"] * 1e6
                 for r, b in zip(runs, base) if r["samples"]]
        busiest = statistics.median([r.get("busiest_thread_hz", 0) for r in runs])
        per_sample = sum(r["bytes"] for r in runs) / max(sum(r["all_samples"] for r in runs), 1)
        print(f"{rate:>6} {runs[0]['mechanism']:>5} {statistics.median(r['median_ms'] for r in runs):>8.2f} "
              f"{statistics.median(ratios):>7.3f} [{min(ratios):.2f}-{max(ratios):.2f}] "
              f"{statistics.median(r['cpu_ms'] for r in runs):>12.2f} "
              f"{statistics.median(cpu_ratios):>7.3f} [{min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}] "
              f"{handler / 1e3:>6.2f} us {statistics.median(extra) / 1e3 if extra else 0:>8.1f} us "
              f"{busiest:>10.0f} {per_sample:>9.1f} {sum(r['dropped'] for r in runs):>7}")


if __name__ == "__main__":
    main()
