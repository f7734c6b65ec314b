"""Off-CPU time: where a Python thread waits (a sleep, I/O, a lock, a collective), from the collector's look at
each thread that is not running, once a scan (instrumenter/collector/sampler.c, ``s_off_cpu_locked``)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from instrumenter.builtin.samples.samplefile import F_NATIVE_TRUNCATED, F_OFF_CPU
from tests.test_profile import autoitt
from tests.test_sampling import line_of, only_samples, script
from tests.test_collector import run_target

WAITS = script("""
    import threading, time, ittapi.compat as itt
    def sleeper():
        time.sleep(1.0)   # SLEEPS
    itt.resume()
    thread = threading.Thread(target=sleeper)
    thread.start()
    t0 = time.monotonic_ns()
    busy(1.0)   # WORKS
    print(t0, time.monotonic_ns())
    thread.join()
""")


def _off_by_line(sf):
    """Off-CPU seconds per (qualname, line) of the innermost Python frame, and per thread."""
    lines, threads = Counter(), Counter()
    for i in np.flatnonzero(sf.flags & F_OFF_CPU):
        frames = [f for f in sf.stacks[sf.stack[i]] if f[0] == "py"]
        seconds = int(sf.weight[i]) * sf.period_ns / 1e9
        lines[(sf.codes[frames[-1][1]].qualname, frames[-1][2])] += seconds
        threads[int(sf.tid[i])] += seconds
    return lines, threads


def test_a_sleeping_thread_is_sampled_off_the_cpu_at_its_line_for_its_wall_time(tmp_path):
    done, traces = run_target(tmp_path, WAITS)
    sf = only_samples(traces, off_cpu=True)
    lines, _threads = _off_by_line(sf)
    # a look every 50 ms, each standing for the time since the last: the second's sleep, within a few looks
    assert 0.7 <= lines[("sleeper", line_of(WAITS, "# SLEEPS"))] <= 1.2, lines
    # the busy thread never blocks: waiting for a core (where other work takes it) is not off-CPU time
    t0, t1 = map(int, done.stdout.split())
    off = (sf.flags & F_OFF_CPU) != 0
    during = (sf.tid == sf.pid) & (sf.ns >= t0) & (sf.ns <= t1)
    assert int(sf.weight[during & off].sum()) * sf.period_ns <= 0.1 * (t1 - t0)
    # off-CPU samples have Python frames only: a native stack would need a signal, which could end the
    # thread's wait with EINTR
    assert all(not any(f[0] == "native" for f in sf.stacks[sf.stack[i]]) for i in np.flatnonzero(off))
    assert not (sf.flags[off] & F_NATIVE_TRUNCATED).any()


def test_off_cpu_samples_are_left_out_where_asked(tmp_path):
    _, traces = run_target(tmp_path, WAITS, AUTOITT_SAMPLE_OFF_CPU="0")
    sf = only_samples(traces, off_cpu=True)
    assert not (sf.flags & F_OFF_CPU).any()
    assert len(sf) > 0


SLEEPY_STEP = """\
import time

def wait_for_io():
    time.sleep(0.03)

def compute():
    total = 0
    for i in range(200000):
        total += i
    return total

for step in range(60):  # autoitt: step
    compute()
    wait_for_io()
"""


def test_a_step_that_sleeps_30_ms_shows_the_sleeping_line_among_its_top_lines_with_its_waiting_time(tmp_path):
    (tmp_path / "train.py").write_text(SLEEPY_STEP)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    lines = {(row["file"], row["line"]): row for row in summary["hotspot_lines"]}
    top = [(row["file"], row["line"]) for row in summary["hotspot_lines"][:3]]
    assert ("train.py", 4) in top, top
    slept = 60 * 0.03
    assert 0.7 * slept <= lines[("train.py", 4)]["off_cpu_s"] <= 1.3 * slept, lines[("train.py", 4)]
    # CPU time stays CPU time: the sleeping line burns none, the loop's lines never block
    assert lines[("train.py", 4)]["self_s"] <= 0.1 * summary["sampling"]["collected_cpu_s"]
    assert lines.get(("train.py", 9), {}).get("off_cpu_s", 0) <= 0.1 * slept
    (step,) = summary["steps"]
    waited = summary["sampling"]["off_cpu_s_in_steps"][step["label"]]
    assert 0.7 * slept <= waited <= 1.3 * slept
    shown = autoitt("report", "out", cwd=tmp_path)
    squeezed = "".join(shown.stdout.split())  # headings wrap within their columns
    assert "waiting:thetimealine'sthreadwasblockedthere" in squeezed and "thestep'sthreadwasblocked" in squeezed
