"""The streaming pass: the same statistics as a plain stack-based pairing, however the records are cut into
blocks, and percentiles within the histogram's documented error."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from instrumenter.builtin.statistics.aggregate import PERCENTILE_ERROR, aggregate
from instrumenter.builtin.statistics.intervals import Keep
from instrumenter.builtin.trace.scan import scan_trace_dir, scan_trace_file
from tests.trace_writer import TraceWriter, event_scans, steps_with_operators, write_events
from tests.contexts import read_context

DOMAIN = "autoitt.train"
NAMES = ("step", "loop", "op")


@st.composite
def thread_events(draw):
    """A thread's begins and ends: nested, with recursion, ends whose begin was dropped, tasks left open."""
    events, depth, ts = [], 0, 0
    for _ in range(draw(st.integers(0, 60))):
        ts += draw(st.integers(0, 50))
        if draw(st.booleans()) or (depth == 0 and draw(st.integers(0, 9)) > 0):
            events.append(("begin", ts, DOMAIN, draw(st.sampled_from(NAMES))))
            depth += 1
        else:
            events.append(("end", ts, DOMAIN, None))
            depth = max(depth - 1, 0)
    return events


def reference(threads: Dict[int, List[Tuple]]) -> Dict[str, list]:
    """Per name: [count, sum, inside, self, min, max], every duration; and the thread time, the unfinished."""
    stats: Dict[str, list] = defaultdict(lambda: [0, 0, 0, 0, None, 0, []])
    thread_time = unfinished = 0
    for events in threads.values():
        stack: List[list] = []
        closed = []
        for kind, ts, _domain, name in events:
            if kind == "begin":
                stack.append([name, ts, 0])
            elif stack:
                closed.append((stack[:-1], stack.pop(), ts, True))
        last = events[-1][1] if events else 0
        while stack:
            unfinished += 1
            closed.append((stack[:-1], stack.pop(), last, False))
        for parents, (name, start, child), end, _finished in closed:
            duration = end - start
            if parents:
                parents[-1][2] += duration
            row = stats[name]
            row[0] += 1
            row[1] += duration
            row[2] += duration if all(p[0] != name for p in parents) else 0
            row[3] += duration - child
            row[4] = duration if row[4] is None else min(row[4], duration)
            row[5] = max(row[5], duration)
            row[6].append(duration)
            thread_time += duration if not parents else 0
    return {"stats": dict(stats), "thread_time": thread_time, "unfinished": unfinished}


def blocks_of(threads, cuts):
    """The threads' records as the scanner would give them, cut into blocks at ``cuts`` (fractions)."""
    from instrumenter.builtin.trace.events import Event
    from instrumenter.builtin.trace.tracefile import ProcessTrace

    trace = ProcessTrace(path=Path("itt-1.bin"), pid=1, ppid=0, start_ns=0, wall_start_ns=0,
                         events=[Event(kind, 1, tid, ts, domain, name)
                                 for tid, events in threads.items() for kind, ts, domain, name in events])
    (copy, blocks), = event_scans([trace])
    whole = next(blocks, {})
    cut_blocks = []
    for low, high in zip([0.0, *cuts], [*cuts, 1.0]):
        block = {tid: records[int(low * len(records)):int(high * len(records))] for tid, records in whole.items()}
        cut_blocks.append({tid: records for tid, records in block.items() if len(records)})
    return [(copy, iter(cut_blocks))]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(1, 3), thread_events(), min_size=1, max_size=3),
       st.lists(st.floats(0.0, 1.0), max_size=4).map(sorted))
def test_statistics_match_a_plain_pairing_however_the_records_are_cut(threads, cuts):
    expected = reference(threads)
    found = aggregate(blocks_of(threads, cuts), [DOMAIN], Keep(), start_paused=False)
    got = {name: [int(found.count[g]), int(found.sum_ns[g]), int(found.inside_ns[g]), int(found.self_ns[g]),
                  int(found.min_ns[g]), int(found.max_ns[g])]
           for g, (_domain, name) in enumerate(found.groups) if found.count[g]}
    assert got == {name: row[:6] for name, row in expected["stats"].items()}
    assert (found.thread_time_ns, found.unfinished) == (expected["thread_time"], expected["unfinished"])
    assert len(found.kept) == sum(row[0] for row in expected["stats"].values())


def test_percentiles_are_within_the_documented_error():
    rng = np.random.default_rng(7)
    durations = np.concatenate([rng.integers(1, 50, 300), rng.lognormal(12, 2, 3000).astype(np.int64) + 1])
    events, ts = [], 0
    for duration in durations.tolist():
        events += [("begin", ts, DOMAIN, "op"), ("end", ts + duration, DOMAIN, None)]
        ts += duration + 1
    found = aggregate(blocks_of({1: events}, []), [DOMAIN], Keep(), start_paused=False)
    ordered = np.sort(durations)
    for q in (0.5, 0.95, 0.99):
        exact = ordered[int(np.ceil(q * (len(ordered) - 1)))]
        assert abs(found.percentile_ns(0, q) - exact) <= PERCENTILE_ERROR * exact + 1


def test_a_file_read_in_small_blocks_gives_what_it_gives_in_one(tmp_path):
    writer = TraceWriter(tmp_path / "itt-100.bin")
    steps_with_operators(writer, 3000, 3)
    writer.close()
    whole = aggregate(scan_trace_dir(tmp_path)[0], [DOMAIN], Keep())
    trace, blocks = scan_trace_file(tmp_path / "itt-100.bin", block_bytes=1000)  # chunks straddle blocks
    pieces = aggregate([(trace, blocks)], [DOMAIN], Keep())
    assert whole.groups == pieces.groups and whole.events == pieces.events == 3000 * 8
    for name in ("count", "sum_ns", "inside_ns", "self_ns", "min_ns", "max_ns", "histogram"):
        assert np.array_equal(getattr(whole, name), getattr(pieces, name)), name


def test_past_the_limit_only_the_own_domains_instances_are_kept(tmp_path):
    writer = TraceWriter(tmp_path / "itt-100.bin")
    steps_with_operators(writer, 100, 4)
    writer.close()
    found = aggregate(scan_trace_dir(tmp_path)[0], [DOMAIN], Keep(limit=200))
    assert not found.kept_everything
    assert {found.groups[g] for g in found.kept.group.tolist()} == {(DOMAIN, "step")}
    assert len(found.kept) == 100 and int(found.count.sum()) == 500  # the statistics still count every one


def test_names_written_after_the_records_that_use_them_still_name_them(tmp_path):
    """A name record sits in its creating thread's buffer: another thread's chunk can reach the file first."""
    write_events(tmp_path / "itt-100.bin", {7: [("begin", 1, DOMAIN, "step"), ("end", 5, DOMAIN, None)]})
    data = (tmp_path / "itt-100.bin").read_bytes()
    header, names_chunk_len = 56, 32 + int.from_bytes(data[64:68], "little")
    names, events = data[header:header + names_chunk_len], data[header + names_chunk_len:]
    (tmp_path / "itt-100.bin").write_bytes(data[:header] + events + names)
    found = aggregate(scan_trace_dir(tmp_path)[0], [DOMAIN], Keep(limit=0))
    assert found.groups == [(DOMAIN, "step")] and len(found.kept) == 1
    assert not found.warnings


STEPS = [("begin", 10, DOMAIN, "step"), ("end", 20, DOMAIN, None), ("begin", 30, DOMAIN, "step"),
         ("end", 40, DOMAIN, None)]
#: gloo's allreduce, begun and still running when the process exited
OPEN_COLLECTIVE = [("begin", 45, "PyTorch", "gloo:all_reduce")]


def test_a_collective_still_running_on_a_framework_thread_at_exit_is_not_a_task_that_never_ended(tmp_path):
    from instrumenter.builtin.statistics.taskstats import summarize

    write_events(tmp_path / "itt-100.bin", {100: STEPS, 101: OPEN_COLLECTIVE})
    found = aggregate(scan_trace_dir(tmp_path)[0], [DOMAIN], Keep())
    assert found.unfinished == 0
    assert not any("never ended" in w for w in summarize(found, read_context(["step"], [DOMAIN])).warnings)
    # still paired and counted, ending at its thread's last event
    assert int(found.count[found.groups.index(("PyTorch", "gloo:all_reduce"))]) == 1


def test_a_task_open_at_exit_on_the_main_thread_never_ended(tmp_path):
    from instrumenter.builtin.statistics.taskstats import summarize

    # the main thread's own step left open, and a collective it began itself
    write_events(tmp_path / "itt-100.bin", {100: [*STEPS, *OPEN_COLLECTIVE, ("begin", 50, DOMAIN, "step")]})
    found = aggregate(scan_trace_dir(tmp_path)[0], [DOMAIN], Keep())
    assert found.unfinished == 2
    assert "2 task(s) never ended" in " ".join(summarize(found, read_context(["step"], [DOMAIN])).warnings)


def test_a_thread_that_ran_an_own_task_is_the_programs(tmp_path):
    write_events(tmp_path / "itt-100.bin", {
        100: [("begin", 10, DOMAIN, "step"), ("end", 20, DOMAIN, None)],
        7: [("begin", 12, DOMAIN, "worker_step"), ("begin", 13, "PyTorch", "aten::mm")],
    })
    assert aggregate(scan_trace_dir(tmp_path)[0], [DOMAIN], Keep()).unfinished == 2
