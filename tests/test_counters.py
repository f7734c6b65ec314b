"""Counters per task: the process's CPU time, page faults, context switches and hardware counts while each
of autoitt's own tasks ran (instrumenter/builtin/statistics/counters.py, the trace format's Counters).

Trace files written by hand (tests/trace_writer.py) with recorded counter
values: this is how the hardware path is tested on a machine whose PMU cannot
be read (hardware counters are "not supported" in these VMs). The collector's
side is tested on a real run in tests/test_sampling.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from instrumenter.builtin.statistics.aggregate import aggregate
from instrumenter.builtin.statistics.counters import counter_notes, task_counters
from instrumenter.builtin.statistics.intervals import Keep
from instrumenter.builtin.trace.scan import scan_trace_dir
from instrumenter.builtin.trace.tracefile import (FLAG_COUNTED_FROM, KIND_BEGIN, KIND_COUNTERS, KIND_DOMAIN_NAME,
                                            KIND_END, KIND_HARDWARE, KIND_HARDWARE2, KIND_NOTE, KIND_STRING_NAME,
                                            RECORD)
from tests.trace_writer import TraceWriter, name_record

OWN = "autoitt.train"


def _write(path, hardware=False, steps=4, note=None, counted_every=1, spans=False, uncounted_ns=500_000):
    writer = TraceWriter(path / "itt-100.bin")
    domain, step = writer.pointer(KIND_DOMAIN_NAME, OWN), writer.pointer(KIND_STRING_NAME, "step")
    if note:
        writer.names += name_record(KIND_NOTE, 0, note)
    rows = []
    for i in range(steps):
        start = 1_000_000 * i
        counted = i % counted_every == 0  # the collector leaves steps shorter than 10 ms uncounted
        rows.append((KIND_BEGIN, 0, 0, 0, start, domain, step))
        rows.append((KIND_END, 0, 0, 0, start + (500_000 if counted else uncounted_ns), domain, 0))
        if not counted:
            continue
        # 0.9 ms of CPU in 0.5 ms of wall time (two threads), 3 page faults, 2 context switches; with spans, as
        # the collector writes it now: at the time its counting began, right after its task's end
        rows.append((KIND_COUNTERS, FLAG_COUNTED_FROM if spans else 0, 2, 3, start if spans else start + 500_000,
                     900_000, step))
        if hardware:
            rows.append((KIND_HARDWARE, 0, 0, 0, start + 500_000, 2_000_000, 3_000_000))
            rows.append((KIND_HARDWARE2, 0, 0, 0, start + 500_000, 6_000, 1_500))
    writer.records(100, np.array(rows, dtype=RECORD))
    writer.close()


def _read(path):
    scans, _ = scan_trace_dir(path)
    traces = [trace for trace, _ in scans]
    found = aggregate(scans, [OWN], Keep(), start_paused=False, step_labels=["step"])
    return traces, found


def test_counters_add_up_per_task_with_cpu_utilization_over_wall_time(tmp_path):
    _write(tmp_path)
    traces, found = _read(tmp_path)
    step = task_counters(traces, found, [OWN])["step"]
    assert (step["count"], step["page_faults"], step["context_switches"]) == (4, 12, 8)
    assert step["cpu_s"] == pytest.approx(0.0036) and step["wall_s"] == pytest.approx(0.002)
    assert step["cpu_utilization"] == pytest.approx(1.8)
    assert "ipc" not in step


def test_the_utilization_of_steps_counted_one_in_several_is_their_cpu_time_over_their_own_wall_time(tmp_path):
    # steps shorter than 10 ms are counted one per 10 ms, the first always: the uncounted ones (0.9 ms here, the
    # counted 0.5 ms) say nothing of the counted ones' CPU time
    _write(tmp_path, steps=20, counted_every=5, spans=True, uncounted_ns=900_000)
    traces, found = _read(tmp_path)
    step = task_counters(traces, found, [OWN])["step"]
    assert (step["count"], step["page_faults_per_instance"]) == (4, 3)
    assert step["cpu_s"] == pytest.approx(0.0036) and step["wall_s"] == pytest.approx(0.0164)
    assert step["cpu_utilization"] == pytest.approx(1.8)


def test_counters_of_an_older_collector_without_spans_stand_on_every_steps_mean_wall_time(tmp_path):
    _write(tmp_path, steps=20, counted_every=5)
    traces, found = _read(tmp_path)
    step = task_counters(traces, found, [OWN])["step"]
    assert step["count"] == 4 and step["wall_s"] == pytest.approx(0.010)
    assert step["cpu_utilization"] == pytest.approx(1.8)


def test_a_span_whose_end_record_is_not_right_before_its_counters_is_left_out(tmp_path):
    # (a counters record after a flush that left its task's end in the block before: its span is not known, the
    # utilisation stands on those known)
    writer = TraceWriter(tmp_path / "itt-100.bin")
    domain, step = writer.pointer(KIND_DOMAIN_NAME, OWN), writer.pointer(KIND_STRING_NAME, "step")
    rows = [(KIND_BEGIN, 0, 0, 0, 0, domain, step), (KIND_END, 0, 0, 0, 500_000, domain, 0),
            (KIND_COUNTERS, FLAG_COUNTED_FROM, 0, 0, 0, 900_000, step),
            (KIND_BEGIN, 0, 0, 0, 1_000_000, domain, step), (KIND_END, 0, 0, 0, 1_500_000, domain, 0),
            (KIND_BEGIN, 0, 0, 0, 2_000_000, domain, step),
            (KIND_COUNTERS, FLAG_COUNTED_FROM, 0, 0, 1_000_000, 900_000, step),
            (KIND_END, 0, 0, 0, 2_500_000, domain, 0)]
    writer.records(100, np.array(rows, dtype=RECORD))
    writer.close()
    traces, found = _read(tmp_path)
    step = task_counters(traces, found, [OWN])["step"]
    assert step["count"] == 2 and step["cpu_utilization"] == pytest.approx(1.8)


def test_recorded_hardware_counts_give_ipc_and_misses_per_thousand_instructions(tmp_path):
    _write(tmp_path, hardware=True)
    traces, found = _read(tmp_path)
    step = task_counters(traces, found, [OWN])["step"]
    assert step["ipc"] == pytest.approx(1.5)
    assert step["cache_misses_per_kilo_instruction"] == pytest.approx(2.0)
    assert step["branch_misses_per_kilo_instruction"] == pytest.approx(0.5)


def test_counters_records_leave_the_task_statistics_alone(tmp_path):
    _write(tmp_path, hardware=True)
    _, found = _read(tmp_path)
    (group,) = [g for g, (d, n) in enumerate(found.groups) if n == "step"]
    assert int(found.count[group]) == 4 and int(found.sum_ns[group]) == 2_000_000
    assert found.events == 8


def test_the_collectors_note_on_hardware_counters_is_kept(tmp_path):
    _write(tmp_path, note="hardware counters: perf_event_open(cycles) failed: not supported")
    traces, _ = _read(tmp_path)
    assert counter_notes(traces) == ["hardware counters: perf_event_open(cycles) failed: not supported"]


COUNTED_STEPS = """
import time, ittapi.compat as itt
own = itt.domain_create("autoitt.train")
itt.resume()
for i in range(6):
    itt.task_begin(own, "step")
    block = bytearray(8 << 20)  # 8 MiB touched: about 2000 page faults
    end = time.process_time() + 0.012  # over COUNT_EVERY_NS: every step is counted
    while time.process_time() < end:
        pass
    itt.task_end(own)
for i in range(20000):  # steps of a microsecond: counted one per 10 ms
    itt.task_begin(own, "tiny")
    itt.task_end(own)
for i in range(100):  # busy steps of half a millisecond: counted one per 10 ms
    itt.task_begin(own, "short")
    end = time.process_time() + 0.0005
    while time.process_time() < end:
        pass
    itt.task_end(own)
"""


def test_a_real_run_counts_cpu_time_and_page_faults_per_step_and_samples_tiny_steps(tmp_path):
    from tests.test_collector import run_target

    _, traces = run_target(tmp_path, COUNTED_STEPS, AUTOITT_SAMPLE_HZ="0", AUTOITT_OWN_DOMAINS=OWN)
    found_traces, found = _read(traces)
    counted = task_counters(found_traces, found, [OWN])
    step, tiny, short = counted["step"], counted["tiny"], counted["short"]
    assert step["count"] == 6
    # One busy thread: about a core, less when the machine is loaded (0.49 seen while a suite ran beside it),
    # never two.
    assert step["cpu_s"] >= 6 * 0.005 and 0.2 <= step["cpu_utilization"] <= 1.5
    assert step["page_faults_per_instance"] >= 1000
    assert 1 <= tiny["count"] < 20000 / 5
    # half-millisecond steps, counted one per 10 ms: a counted one's CPU time over a step's mean wall time, about
    # a core (not the counted share of one, 0.05)
    assert 2 <= short["count"] <= 50 and 0.2 <= short["cpu_utilization"] <= 1.5


MODULE_WITH_STEPS = """\
import time


def train(steps):
    for i in range(steps):  # autoitt: step
        time.sleep(0.011)  # over COUNT_EVERY_NS (10 ms): every step is counted
"""


@pytest.mark.slow
def test_a_project_of_more_modules_than_the_collector_once_kept_own_domains_has_counters_for_every_step(tmp_path):
    """Each instrumented module has an own domain (autoitt.<module>); the collector kept the first 8 and
    silently dropped the counters of the others' steps (a project of 9 modules recorded 27 steps, counted 24)."""
    import json

    from tests.test_profile import autoitt

    modules, steps = 11, 3
    for i in range(modules):
        (tmp_path / f"part{i}.py").write_text(MODULE_WITH_STEPS)
    entry = "".join(f"import part{i}\n" for i in range(modules))
    entry += "".join(f"part{i}.train({steps})\n" for i in range(modules))
    (tmp_path / "train.py").write_text(entry)
    done = autoitt("profile", "--json", "-r", "out", "train.py", cwd=tmp_path, env={"AUTOITT_SAMPLE_HZ": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    domains = {t["domain"] for t in summary["tasks"] if t["name"] == "step"}
    assert len(domains) == modules, domains
    (step,) = summary["steps"]
    assert step["count"] == modules * steps
    assert summary["counters"]["step"]["count"] == modules * steps
