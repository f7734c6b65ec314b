"""Counters per task: what the process counted while each of autoitt's own tasks ran (step, epoch, evaluation).

Input: the sums the reader adds up from the collector's counters records
(:attr:`~..trace.tracefile.ProcessTrace.counters`, see the trace format's Counters)
and the tasks' wall time from the streaming pass. Output: per task label,
its CPU time and utilisation, page faults and context switches, and where the
PMU could be read, cycles, instructions (IPC), cache and branch misses.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

from .aggregate import Aggregates
from ..trace.tracefile import ProcessTrace

_FIELDS = ("instances", "cpu_ns", "page_faults", "context_switches", "hardware_instances", "cycles",
           "instructions", "cache_misses", "branch_misses", "spans", "span_ns")


def task_counters(traces: Sequence[ProcessTrace], found: Aggregates,
                  own_domains: Iterable[str]) -> Dict[str, Dict[str, float]]:
    """Per own task label: ``count`` (the instances counted), ``wall_s`` (every instance's), ``cpu_s`` and
    ``cpu_utilization`` (CPU time of every thread of the process over wall time: 2.0 is two cores busy),
    ``page_faults``, ``context_switches`` (the counted instances' totals) and their means per counted instance;
    with hardware counts, ``cycles``, ``instructions``, ``ipc``, ``cache_misses``, ``branch_misses`` and the
    misses per thousand instructions.

    The collector counts instances shorter than 10 ms one per 10 ms, and the first always (counters.c), so the
    counted instances are a sample of the label's, not a fair one: the utilisation is their CPU time over their
    own wall time, which the collector's counters records give (the span from the counting's start to the task's
    end record). The sum of the counted CPU time over every instance's wall time read 0.05 cores for a busy
    thread of 0.5 ms steps; their mean CPU time over every instance's mean wall time read 6 cores for a Keras
    fit on 2, its long first step counted and the others mostly not. Records of a collector before the spans
    (no counted-from flag) still get the mean wall time of every instance, the nearest they allow."""
    own = set(own_domains)
    sums: Dict[str, List[int]] = {}
    for trace in traces:
        for pointer, values in trace.counters.items():
            name = trace.strings.get(pointer)
            if name is None:
                continue
            totals = sums.setdefault(name, [0] * len(_FIELDS))
            for i, value in enumerate(values):
                totals[i] += value
    wall: Dict[str, int] = {}
    instances: Dict[str, int] = {}
    for group, (domain, name) in enumerate(found.groups):
        if domain in own:
            wall[name] = wall.get(name, 0) + int(found.sum_ns[group])
            instances[name] = instances.get(name, 0) + int(found.count[group])
    result: Dict[str, Dict[str, float]] = {}
    for name, values in sums.items():
        row = dict(zip(_FIELDS, values))
        count = row["instances"]
        if not count:
            continue
        entry = {"count": count, "wall_s": wall.get(name, 0) / 1e9, "cpu_s": row["cpu_ns"] / 1e9,
                 "page_faults": row["page_faults"], "context_switches": row["context_switches"],
                 "page_faults_per_instance": row["page_faults"] / count,
                 "context_switches_per_instance": row["context_switches"] / count}
        spans = row.get("spans", 0)
        if spans:  # a span of an instance lost at a block's edge leaves the mean of those known
            mean_wall_s = row["span_ns"] / spans / 1e9
        else:
            mean_wall_s = entry["wall_s"] / instances[name] if instances.get(name) else 0.0
        entry["cpu_utilization"] = entry["cpu_s"] / count / mean_wall_s if mean_wall_s else 0.0
        entry.update(hardware(row))
        result[name] = entry
    return result


def hardware(row: Dict[str, int]) -> Dict[str, float]:
    """The hardware counts of a task and what they say: instructions per cycle, misses per thousand
    instructions (empty where the PMU was not read)."""
    if not row.get("hardware_instances"):
        return {}
    cycles, instructions = row["cycles"], row["instructions"]
    found = {"cycles": cycles, "instructions": instructions, "cache_misses": row["cache_misses"],
             "branch_misses": row["branch_misses"], "ipc": instructions / cycles if cycles else 0.0}
    if instructions:
        found["cache_misses_per_kilo_instruction"] = 1000 * row["cache_misses"] / instructions
        found["branch_misses_per_kilo_instruction"] = 1000 * row["branch_misses"] / instructions
    return found


def counter_notes(traces: Sequence[ProcessTrace]) -> List[str]:
    """The collector's notes on counting (why hardware counters were not read), once each."""
    seen: List[str] = []
    for trace in traces:
        for note in trace.notes:
            if note not in seen:
                seen.append(note)
    return seen


def uncollected(traces: Sequence[ProcessTrace]) -> Dict[str, int]:
    """Per task name of an own domain, how many began while collection was paused, over every process (the
    collector's paused-begins records)."""
    found: Dict[str, int] = {}
    for trace in traces:
        for name, count in trace.paused_begins.items():
            found[name] = found.get(name, 0) + count
    return found
