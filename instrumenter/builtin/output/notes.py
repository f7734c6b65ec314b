"""The summary's notes: a sentence for each finding worth a look, from the summary and the instrumentation.

Each note is computed from facts the summary already holds (the split of the
run, the steps' warm-up and phases, the tasks recorded) and the regions the
rewrite marked; nothing here reads a trace.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ...profile.console import duration
from ...profile.instrumentation import Instrumentation
from ...runtime.libraries import EPOCH, STEP
from ..statistics.summary import BuiltinSummary

#: A part of the run worth a note, as a share of it.
LARGE_PART = 0.5
#: oneDNN primitive creation in steady steps worth a note, as a share of the step (a cache hit costs ~1 µs).
CREATION_SHARE = 0.05
#: Other work on the machine worth a note: this many cores busy on average, and this share of the run's cores.
CONTENTION_CORES = 0.5
CONTENTION_SHARE = 0.25


def contention_note(machine: Optional[dict], steps) -> List[str]:
    """A sentence when other work took the machine's cores while the run ran: then slow steps, and a long
    "warm-up", may be the wait for a core rather than the run."""
    if not machine or machine.get("elapsed_s", 0) <= 0:
        return []
    cores = machine["other_cpu_s"] / machine["elapsed_s"]
    if cores < CONTENTION_CORES or cores < CONTENTION_SHARE * machine["cpus"]:
        return []
    warm = [f"{step.warmup_steps} `{step.label}`" for step in steps if step.warmup_steps]
    return [f"other work on this machine kept {cores:.1f} of its {machine['cpus']:.0f} cores busy on average while "
            f"the run ran (the run's own processes: {machine['run_cpu_s'] / machine['elapsed_s']:.1f}): slow steps"
            + (f", and the warm-up ({', '.join(warm)} steps)," if warm else "")
            + " may be the wait for a core, not the run; profile on an idle machine to compare"]


#: Under this many samples' worth of CPU time a sampled share is said to be thin: its standard error is then above 7
#: points (at 50 %: sqrt(0.25 / 50)), so close shares are chance (:func:`thin_hotspots`, :func:`thin_phase_split`).
FEW_SAMPLES = 50


def _samples(worth: int, period_s: float) -> str:
    """How many samples a thin figure stands on, and what each stands for."""
    return f"about {worth} sample{'s' * (worth != 1)} ({duration(period_s)} of CPU each)"


def thin_hotspots(sampling: Optional[dict]) -> Optional[str]:
    """The sentence for hotspots drawn from fewer than :data:`FEW_SAMPLES` samples' worth of the CPU time sampled
    in collection (``sampling["collected_cpu_s"]``); None otherwise."""
    period = (sampling or {}).get("period_s") or 0
    collected = (sampling or {}).get("collected_cpu_s") or 0
    if not period or collected / period >= FEW_SAMPLES:
        return None
    return (f"these hotspots stand on {_samples(max(round(collected / period), 1), period)}: too few to rank them "
            "closely; a longer run, or a higher --sample-rate, gives more")


def thin_phase_split(sampling: Optional[dict], label: str) -> Optional[str]:
    """The sentence for a step loop whose phases' ``python`` and ``compute`` the samples told apart (no operator
    tasks: ``sampling["phase_split_cpu_s"]``) from fewer than :data:`FEW_SAMPLES` samples; None otherwise. With
    none in its steps (a short fit of millisecond steps), nothing told them apart: it says so."""
    period = (sampling or {}).get("period_s") or 0
    in_steps = ((sampling or {}).get("phase_split_cpu_s") or {}).get(label)
    if in_steps is None or not period or in_steps / period >= FEW_SAMPLES:
        return None
    worth = round(in_steps / period)
    if worth == 0:  # python's sampled time is 0 of 0: the phases show all of it as compute
        return ("no sample was taken in these steps, so python and compute are not told apart (their time shows "
                "as compute); a longer run, or a higher --sample-rate, gives samples")
    return (f"python and compute are told apart by the samples taken in these steps: {_samples(worth, period)}, too "
            "few to split them closely; a longer run, or a higher --sample-rate, gives more")


def split_notes(split: Optional[dict], elapsed_s: Optional[float]) -> List[str]:
    """A sentence for each large part of the run outside collection."""
    if not split or not elapsed_s or elapsed_s <= 0:
        return []
    notes = []
    if split["before_s"] / elapsed_s >= LARGE_PART:
        notes.append(f"{split['before_s'] / elapsed_s:.0%} of the run is before training starts (start-up, "
                     "imports, data preparation: not collected)")
    if split["after_s"] / elapsed_s >= LARGE_PART / 2:
        notes.append(f"{split['after_s'] / elapsed_s:.0%} of the run is after the last pause (a final "
                     "evaluation, saving, shutdown: not collected)")
    return notes


def one_task_calls(instrumentation: Instrumentation, counted: Dict[Tuple[str, str], int]) -> List[str]:
    """Why each library call that ran stayed one task, with no epoch or step of its own: autoitt gave its library
    no callback (detection's reason), or the library took none (an object of a library autoitt has no callbacks
    for: the run's output has the line autoitt printed then)."""
    found = []
    for file in instrumentation.files:
        plain = dict(file.one_task)
        inside = sum(counted.get((file.domain, label), 0) for label in (*file.step_labels, STEP, EPOCH))
        for region in file.regions:
            line, label = region["line"], region["label"]
            if region["role"] not in ("train-call", "eval") or not counted.get((file.domain, label)):
                continue  # a loop, or a call that did not run
            if line in plain:
                found.append(f"`{label}` ({file.relative}:{line}) ran as one task, its epochs and steps not marked: "
                             f"{plain[line]}")
            elif region["role"] == "train-call" and not inside:
                found.append(f"`{label}` ({file.relative}:{line}) ran as one task, no epoch or step recorded inside "
                             "it: its object is not of a library autoitt has callbacks for (Keras, Lightning, "
                             "Hugging Face and trl, ignite, Stable-Baselines3), or the library took none; the "
                             "run's output has the line autoitt printed when the call began, saying which")
    return found


def notes(summary: BuiltinSummary, instrumentation: Optional[Instrumentation]) -> List[str]:
    """Every note for ``summary``, most telling first."""
    found = contention_note(summary.machine, summary.steps) + split_notes(summary.run_split, summary.elapsed_s)
    for step in summary.steps:
        steady = step.steady_median_s or step.median_s
        if steady and step.steady_creation_s >= CREATION_SHARE * steady:
            found.append(f"oneDNN spends {duration(step.steady_creation_s)} of each steady `{step.label}` "
                         f"({step.steady_creation_s / steady:.0%} of its median) creating primitives "
                         f"({step.steady_creations} creations in {step.phase_steps} steps): its primitive cache "
                         "misses, as when input shapes change from step to step; the dnnl::primitive::create "
                         "tasks (--verbose, trace.json) show which")
    if instrumentation is None:
        return found
    counted = {(task.domain, task.name): task.count for task in summary.tasks}
    found += one_task_calls(instrumentation, counted)
    paused = dict(summary.uncollected)
    for file in instrumentation.files:
        for region in file.regions:
            label, role = region.get("label"), region.get("role")
            if role not in ("step", "eval"):
                continue
            outside = paused.pop(label, 0)  # counted by name: one note for the regions sharing a label
            kind = "evaluation" if role == "eval" else "step"
            if outside:
                found.append(f"the {kind} loop at {file.relative}:{region['line']} ran {outside} `{label}` "
                             "iteration(s) while collection was paused (outside every training region, as after the "
                             "last one ended): they are in none of these figures")
            elif role == "eval" and summary.steps and not counted.get((file.domain, label)):
                found.append(f"the evaluation at {file.relative}:{region['line']} was not collected: it ran "
                             "after the last pause (or not at all)")
    uses_tensorflow = any("tensorflow" in file.frameworks for file in instrumentation.files)
    if uses_tensorflow and (summary.sampling or {}).get("xla"):
        found.append("TensorFlow ran XLA-compiled code (jit_compile): XLA's kernels record no ITT tasks, so there "
                     "are no operator rows; the step's time in the framework is its compute phase (told from its "
                     "Python by the samples), and the compiled kernels are `[JIT or anonymous code]` in the hotspots")
    elif uses_tensorflow and not any(task.domain.startswith("dnnl::") for task in summary.tasks):
        found.append("TensorFlow recorded no oneDNN tasks, so its operators and their phases are not shown: "
                     "its oneDNN optimizations are off on this CPU or by setting; `TF_ENABLE_ONEDNN_OPTS=1 "
                     "autoitt profile ...` turns them on")
    return found
