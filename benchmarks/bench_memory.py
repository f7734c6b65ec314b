"""Does a long instrumented loop keep a flat memory footprint?

Runs, each in a fresh process (so one's memory does not hide another's),
``--steps`` iterations (default 2 M) of a begin/end marker pair on one task
name, as an instrumented copy's step loop does, and reports the growth of the
process's peak RSS per million steps:

  ittapi.compat       ``itt.task_begin(domain, "step")`` as the recipe writes it
  Collection          the same call through the copy's runtime (instrumenter.runtime.collection)

With and without autoitt's collector attached (started paused, as under
``autoitt profile``, so the trace file stays small). ``ittapi.compat`` makes
a string handle per call and never frees it; the copy's runtime makes one per
name. Growth is measured after a warm-up of 10,000 steps; nothing is
asserted: compare the rows.

Usage:  .venv/bin/python benchmarks/bench_memory.py [--steps N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = """
import resource, sys
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection
steps, runtime = int(sys.argv[1]), sys.argv[2]
marker = Collection(itt) if runtime == "Collection" else itt
domain = marker.domain_create("bench")
def rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(10_000):
    marker.task_begin(domain, "step"); marker.task_end(domain)
before = rss_kib()
for _ in range(steps):
    marker.task_begin(domain, "step"); marker.task_end(domain)
print((rss_kib() - before) / (steps / 1e6))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2_000_000, help="marker pairs per run (default 2 M)")
    args = parser.parse_args(argv)
    from instrumenter.collector import environment

    print(f"peak RSS growth per million steps, {args.steps:,} steps after a 10,000-step warm-up")
    print(f"{'markers':<16} {'collector':<10} {'KiB / M steps':>14}")
    with tempfile.TemporaryDirectory() as traces:
        for collector in (False, True):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
            if collector:
                env.update(environment(traces, start_paused=True))
            for runtime in ("ittapi.compat", "Collection"):
                done = subprocess.run([sys.executable, "-c", CHILD, str(args.steps), runtime], env=env,
                                      capture_output=True, text=True, check=True)
                print(f"{runtime:<16} {'attached' if collector else 'none':<10} {float(done.stdout):>14.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
