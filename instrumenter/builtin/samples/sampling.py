"""A run's CPU-time samples, summarized: hotspots over the collected training, per task, and outside collection.

Input: each process's ``samples-<pid>.bin`` (:mod:`.samplefile`), the traces'
names of domains and string handles (a sample's tasks are their pointers),
and the instrumentation (the project's files, the own domains). Output: the
summary's ``sampling``, ``hotspots``, ``hotspots_by_task`` and
``hotspots_outside``, and the folded stacks of ``hotspots.folded``.

A sample belongs to the innermost own task of its thread (step, epoch,
evaluation, the loops), or, on a thread without one (an OpenMP or oneDNN
worker), to the one open in its process then (*inherited*). Besides the own
regions, ``hotspots_by_task`` has the :data:`TASKS` other tasks (operators)
with the most samples, by their innermost task. A sample taken while
collection was paused is outside collection: start-up, imports, data
preparation, what runs after the last pause.

Off-CPU samples (the collector's look, once a scan, at each Python thread
that is blocked: its Python frames, its tasks, and the wall time since
its previous look) are kept apart from the CPU time: they give the user's
lines the time they waited (``off_cpu_s``), each region its off-CPU time,
and each step loop its threads' off-CPU time during the measured steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ...profile.instrumentation import Instrumentation
from ..statistics.summary import Hotspot
from . import hotspots
from .samplefile import F_OFF_CPU, SampleFile
from .stacks import AUTOITT, Resolver

#: Tasks other than the own regions given their own hotspot list: the most sampled ones.
TASKS = 10
#: The outside-collection list is short.
OUTSIDE = 8
#: The root frame of the folded stacks taken outside collection (the others' is their task: ``[step]``).
OUTSIDE_ROOT = "[outside collection]"


@dataclass
class Sampled:
    """What the samples give the summary, and the folded stacks."""

    info: Dict[str, object]
    hotspots: List[Hotspot] = field(default_factory=list)
    lines: List[Hotspot] = field(default_factory=list)
    by_task: Dict[str, List[Hotspot]] = field(default_factory=dict)
    outside: List[Hotspot] = field(default_factory=list)
    outside_lines: List[Hotspot] = field(default_factory=list)
    folded: List[str] = field(default_factory=list)


def summarize_samples(files: Sequence[SampleFile], names: Dict[int, Tuple[Dict[int, str], Dict[int, str]]],
                      instrumentation: Optional[Instrumentation], own_domains: Iterable[str],
                      step_spans: Optional[Dict[str, Dict[Tuple[int, int], Tuple[np.ndarray, np.ndarray]]]] = None,
                      windows: Optional[Dict[int, List[Tuple[int, int]]]] = None) -> Optional[Sampled]:
    """``names``: per pid, (domains, strings) of its trace. None when no process wrote samples. ``step_spans``:
    per step label, the steps its phases are over (:attr:`~instrumenter.builtin.statistics.summary.StepStats.measured_spans`):
    ``info["python_cpu_s_in_steps"]`` then has, per label, their threads' CPU time in Python during them, and
    ``info["cpu_s_in_steps"]`` all of their threads' sampled CPU time during them (how many samples that split
    stands on: the summary says when they are few).
    ``windows``: per pid, its collection windows (:attr:`~..statistics.aggregate.Aggregates.windows`), for the processes
    that never controlled collection themselves (see :func:`_outside_collection`)."""
    if not files:
        return None
    resolver = Resolver(instrumentation)
    own = set(own_domains)
    stacks: List[Tuple[hotspots.Frame, ...]] = []
    parts = []
    period_ns = 0
    regions: Dict[Optional[str], int] = {}
    tasks: Dict[Optional[str], int] = {}
    python_s: Dict[str, float] = {}  # per step label, samples' weights for now
    in_steps: Dict[str, float] = {}
    off_in_steps: Dict[str, float] = {}
    parents = {samples.pid: samples.ppid for samples in files}
    for samples in files:
        period_ns = period_ns or samples.period_ns
        if not len(samples):
            continue
        offset = len(stacks)
        stacks.extend(resolver.stacks(samples))
        for label, spans in (step_spans or {}).items():
            python, every, off = _in_spans(samples, stacks, offset, spans)
            python_s[label] = python_s.get(label, 0.0) + python
            in_steps[label] = in_steps.get(label, 0.0) + every
            off_in_steps[label] = off_in_steps.get(label, 0.0) + off
        domains, strings = names.get(samples.pid, ({}, {}))
        region = _task_keys(samples.autoitt_domain, samples.autoitt_name, domains, strings, own, regions)
        task = _task_keys(samples.task_domain, samples.task_name, domains, strings, None, tasks)
        weight = samples.weight.astype(np.int64)
        paused = _outside_collection(samples, windows or {}, parents)
        off = (samples.flags & F_OFF_CPU) != 0
        parts.append((samples.stack.astype(np.int64) + offset, weight, paused, region, task, off))
    period_s = (period_ns or 1_000_000) / 1e9
    info = _info(files, period_s)
    if step_spans:
        info["python_cpu_s_in_steps"] = {label: weight * period_s for label, weight in python_s.items()}
        info["cpu_s_in_steps"] = {label: weight * period_s for label, weight in in_steps.items()}
        info["off_cpu_s_in_steps"] = {label: weight * period_s for label, weight in off_in_steps.items()}
    if not parts:
        return Sampled(info)
    stack = np.concatenate([p[0] for p in parts])
    weight = np.concatenate([p[1] for p in parts])
    paused = np.concatenate([p[2] for p in parts])
    region_key = np.concatenate([p[3] for p in parts])
    task_key = np.concatenate([p[4] for p in parts])
    off = np.concatenate([p[5] for p in parts])
    region_names, task_names = list(regions), list(tasks)
    # every figure below is CPU time but the off-CPU ones: CPU samples in `inside` and `paused`
    inside, paused, off_inside, off_paused = ~paused & ~off, paused & ~off, ~paused & off, paused & off
    info.update(collected_cpu_s=float(weight[inside].sum()) * period_s,
                outside_cpu_s=float(weight[paused].sum()) * period_s,
                collected_off_cpu_s=float(weight[off_inside].sum()) * period_s,
                outside_off_cpu_s=float(weight[off_paused].sum()) * period_s)
    result = Sampled(info)
    def counts(chosen: np.ndarray) -> List[Tuple[int, int]]:
        return hotspots.counts_of(stack[chosen], weight[chosen])

    collected = counts(inside)
    # TensorFlow compiled with XLA (jit_compile): its kernels record no ITT task (the notes say so)
    info["xla"] = any(_XLA in frame.function for i, _n in collected for frame in stacks[i] if frame.file is None)
    # what profiling itself cost the run (stacks.AUTOITT: folded where a stack enters it)
    info["profiling_cpu_s"] = sum(n for i, n in collected if stacks[i][-1:] == (AUTOITT,)) * period_s
    result.hotspots = hotspots.top(stacks, collected, period_s)
    result.lines = hotspots.own_lines(stacks, collected, period_s, off_cpu=counts(off_inside))
    uncollected = counts(paused)
    result.outside = hotspots.top(stacks, uncollected, period_s, OUTSIDE)
    result.outside_lines = hotspots.own_lines(stacks, uncollected, period_s, OUTSIDE, off_cpu=counts(off_paused))
    # folded stacks under a root frame saying where they ran, so a flame graph splits by task first
    result.folded = list(hotspots.folded(stacks, uncollected, (OUTSIDE_ROOT,)))
    by_task_cpu: Dict[str, float] = {}
    by_task_off: Dict[str, float] = {}
    for key, name in enumerate(region_names):
        chosen = inside & (region_key == key)
        in_region = counts(chosen)
        result.folded.extend(hotspots.folded(stacks, in_region, (f"[{name or 'no region'}]",)))
        if name:
            result.by_task[name] = hotspots.top(stacks, in_region, period_s)
            by_task_cpu[name] = float(weight[chosen].sum()) * period_s
            by_task_off[name] = float(weight[off_inside & (region_key == key)].sum()) * period_s
    info["cpu_s_by_task"] = by_task_cpu
    info["off_cpu_s_by_task"] = by_task_off
    others = inside & ~np.isin(task_key, [k for k, n in enumerate(task_names) if n in result.by_task or not n])
    ranked = np.bincount(task_key[others], weights=weight[others], minlength=len(task_names))
    for key in np.argsort(-ranked, kind="stable")[:TASKS].tolist():
        if ranked[key] > 0:
            result.by_task[task_names[key]] = hotspots.top(stacks, counts(inside & (task_key == key)), period_s)
    return result


def _outside_collection(samples: SampleFile, windows: Dict[int, List[Tuple[int, int]]],
                        parents: Dict[int, int]) -> np.ndarray:
    """Per sample: taken outside collection. A process's own flags say so, except in a process that was not
    forked and never resumed collection itself (a DataLoader worker started by spawn or forkserver: its
    collector samples from its start, always paused, for it makes no ITT call): its samples are collected
    while the nearest process above it that has collection windows (the training process) collects, as a
    forked worker's are, whose collector state is its parent's."""
    if samples.forked or windows.get(samples.pid):
        return samples.paused
    pid, seen = samples.ppid, set()
    while not windows.get(pid) and pid in parents and pid not in seen:
        seen.add(pid)
        pid = parents[pid]
    spans = sorted(windows.get(pid) or ())
    if not spans:
        return samples.paused
    starts = np.array([start for start, _end in spans], np.int64)
    ends = np.array([end for _start, end in spans], np.int64)
    ns = samples.ns.astype(np.int64)
    at = np.searchsorted(starts, ns, side="right") - 1
    return ~((at >= 0) & (ns <= ends[np.maximum(at, 0)]))


#: In the names of XLA's CPU compiler and runtime (``xla::cpu::IrCompiler``, ``xla::cpu::...Thunk``).
_XLA = "xla::cpu::"
#: The C runtime: a leaf here is its caller's (Python's malloc, TensorFlow's memcpy).
_C_RUNTIME = ("libc.so", "libm.so", "ld-linux", "libpthread.so", "libgcc_s.so")


def _in_python(stack: Tuple[hotspots.Frame, ...]) -> bool:
    """The sample was in Python: its innermost frame past the C runtime is a Python frame, the interpreter's,
    or profiling's (markers the Python loop calls); not a framework's native code or JIT-compiled kernels."""
    for frame in reversed(stack):
        if frame.file is None and (frame.library or "").startswith(_C_RUNTIME):
            continue
        return frame.file is not None or frame is AUTOITT or (frame.library or "").startswith(("libpython", "python"))
    return False


def _in_spans(samples: SampleFile, stacks: List[Tuple[hotspots.Frame, ...]], offset: int,
              spans: Dict[Tuple[int, int], Tuple[np.ndarray, np.ndarray]]) -> Tuple[float, float, float]:
    """The weight of ``samples`` taken on the spans' threads, inside them: (CPU in Python (:func:`_in_python`),
    CPU in all, off-CPU)."""
    total = every = off = 0.0
    for (pid, tid), (starts, ends) in spans.items():
        if pid != samples.pid or not len(starts):
            continue
        mine = np.flatnonzero((samples.tid == tid) & ~samples.paused)
        if not len(mine):
            continue
        order = np.argsort(starts, kind="stable")
        at = np.searchsorted(starts[order], samples.ns[mine].astype(np.int64), side="right") - 1
        inside = (at >= 0) & (samples.ns[mine].astype(np.int64) <= ends[order][np.maximum(at, 0)])
        chosen = mine[inside]
        waiting = (samples.flags[chosen] & F_OFF_CPU) != 0
        off += float(samples.weight[chosen][waiting].sum())
        chosen = chosen[~waiting]
        if not len(chosen):
            continue
        unique, inverse = np.unique(samples.stack[chosen], return_inverse=True)
        python = np.array([_in_python(stacks[offset + int(i)]) for i in unique.tolist()], np.bool_)[inverse]
        total += float(samples.weight[chosen][python].sum())
        every += float(samples.weight[chosen].sum())
    return total, every, off


def _task_keys(domain_ptrs: np.ndarray, name_ptrs: np.ndarray, domains: Dict[int, str], strings: Dict[int, str],
               own: Optional[set], names: Dict[Optional[str], int]) -> np.ndarray:
    """Each sample's task as an index into ``names`` (task name -> index, grown here; None: no task, or not
    one of ``own``'s domains when given)."""
    if not len(name_ptrs):
        return np.zeros(0, np.int64)
    pairs, inverse = np.unique(np.stack([domain_ptrs, name_ptrs], axis=1), axis=0, return_inverse=True)
    lut = []
    for d, n in pairs.tolist():
        name = strings.get(n) if n else None
        if own is not None and domains.get(d) not in own:
            name = None
        lut.append(names.setdefault(name, len(names)))
    return np.asarray(lut, np.int64)[inverse.reshape(-1)]


def _info(files: Sequence[SampleFile], period_s: float) -> Dict[str, object]:
    reasons = sorted({r for f in files for r in f.reasons})
    return {
        "rate_hz": max((f.rate_hz for f in files), default=0),
        "mechanism": next((f.mechanism for f in files if f.mechanism != "none"), "none"),
        "python_frames": next((f.python for f in files if f.python != "none"), "none"),
        "samples": int(sum(np.count_nonzero((f.flags & F_OFF_CPU) == 0) for f in files)),
        "off_cpu_samples": int(sum(np.count_nonzero(f.flags & F_OFF_CPU) for f in files)),
        "dropped": int(sum(f.dropped for f in files)),
        "lost": int(sum(f.lost for f in files)),
        "processes": len(files),
        # as the samples saw them: DataLoader workers and OpenMP threads run no task, but take CPU time
        "processes_sampled": sum(1 for f in files if len(f)),
        "threads": int(sum(len(np.unique(f.tid)) for f in files)),
        "reasons": reasons,
        "period_s": period_s,
    }
