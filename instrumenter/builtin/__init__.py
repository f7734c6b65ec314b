"""The built-in backend: autoitt's own ITT collector records every ITT task of the run; no VTune needed.

run: the copy's command (:func:`instrumenter.launch.command`, in its environment) with the collector attached (:mod:`instrumenter.collector`),
each process writing ``itt/itt-<pid>.bin`` (format: :mod:`.tracefile`);
read: traces -> one streaming pass (:mod:`.aggregate`) -> statistics (:mod:`.taskstats`),
the timeline's window (:mod:`.timeline`), ``trace.json`` (:mod:`.chrome_trace`), ``steps.svg``
(:mod:`.plot`) and ``summary.json``;
render: :mod:`.render`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from .. import target
from ..backend import Backend, Finished, Job, Say
from ..machine import Usage, during
from ..console import readable
from .. import launch
from ..instrumentation import FILE as INSTRUMENTATION_FILE
from ..options import under_launcher
from ..instrumentation import Instrumentation
from ..results import RUN_FILE, RunRecord, autoitt_fault
from ..summary import Summary

#: The collector's per-process files, inside the result folder.
TRACE_SUBDIR = "itt"
#: What a read saves: the summary ``autoitt report`` prints again.
SUMMARY_FILE = "summary.json"
#: The sampled stacks, folded (flame-graph tools, speedscope).
FOLDED_FILE = "hotspots.folded"


class BuiltinBackend(Backend):
    name = "builtin"

    def run(self, job: Job, say: Say) -> Finished:
        from ..collector import environment

        if job.options.vtune_flags_given:
            say(f"{', '.join(job.options.vtune_flags_given)}: VTune backend options, ignored with the built-in collector")
        say(f"running {job.script} ({job.copy.name}) with the built-in collector; results in {job.folder}/")
        env = launch.environment(os.environ, job.script, job.folder / INSTRUMENTATION_FILE)
        env.update(environment(job.folder / TRACE_SUBDIR, job.instrumentation.start_paused, job.options.trace_limit,
                               job.options.sample_hz, job.instrumentation.domains))
        started, started_at = time.perf_counter(), time.time()
        before = Usage.now()
        # --json keeps autoitt's stdout for the summary: the script prints to stderr.
        # the script's own arguments follow the .pyc in the command (deepspeed's --local_rank goes there)
        args_at = job.command.index(str(launch.main_file(job.folder / INSTRUMENTATION_FILE, job.script))) + 1
        command = list(under_launcher(job.options.launcher, job.command, args_at=args_at))
        process = target.start(command, env=env, stdout=sys.stderr.fileno() if job.options.json_output else None)
        exit_code = target.wait(process)
        elapsed = time.perf_counter() - started
        return Finished(exit_code, elapsed, started_at, during(before, Usage.now(), elapsed))

    def read(self, folder: Path, record: RunRecord, instrumentation: Instrumentation) -> Summary:
        """Read the traces once, for the statistics and the timeline, and the samples for the hotspots; write
        trace.json, summary.json, steps.svg and hotspots.folded (when samples were taken) where the folder can be
        written: a read-only result folder is still summarized."""
        from ..results import save_outputs, unwritten_warnings
        from . import chrome_trace
        from .aggregate import aggregate
        from .plot import step_time_svg
        from .step_marks import step_marks
        from .ranks import rank_stats, stragglers
        from .taskstats import cut_steps, run_split, summarize
        from .counters import counter_notes, task_counters
        from .samplefile import read_sample_dir
        from .sampling import summarize_samples
        from .scan import scan_trace_dir
        from .timeline import StepWindow, keep_policy, timeline
        from .phases import with_samples
        from dataclasses import replace

        trace_dir = folder / TRACE_SUBDIR
        scans, skipped = scan_trace_dir(trace_dir) if trace_dir.is_dir() else ([], [])
        traces = [trace for trace, _blocks in scans]
        steps = StepWindow.parse(record.trace_steps)
        labels, domains = instrumentation.step_labels, instrumentation.domains
        found = aggregate(scans, domains, keep_policy(steps), instrumentation.start_paused, labels)
        # a run whose end was never recorded (autoitt was killed while it ran) has no elapsed time: not 0
        ended = record.elapsed_s > 0 or record.exit_code is not None
        summary = summarize(found, record.elapsed_s if ended else None, labels, domains, first_step=record.first_step)
        summary.steps = cut_steps(summary.steps, found.kept, found.groups, domains,
                                  [trace.pid for trace in traces if trace.cut])
        if not ended:
            summary.warnings.append(f"the run's end was not recorded in {RUN_FILE} (autoitt was stopped before the "
                                    "run ended, or could not write it): its elapsed time and exit code are unknown")
        summary.run_split = run_split(traces, found.windows, record)
        summary.machine = record.machine
        summary.ranks = rank_stats(traces, found.kept, found.groups, labels, domains)
        summary.stragglers = stragglers(summary.ranks)
        summary.warnings.extend(skipped)
        fault = autoitt_fault(folder)
        if fault:
            summary.warnings.append(fault)
        elif not any(task.domain in domains for task in summary.tasks):
            summary.warnings.append(_why_nothing(traces, skipped, instrumentation, summary, record.exit_code))
        kept, summary.trace_window = timeline(found, labels, domains, steps)
        summary.counters, summary.counter_notes = task_counters(traces, found, domains), counter_notes(traces)
        sampled = summarize_samples(read_sample_dir(trace_dir) if trace_dir.is_dir() else [],
                                    {trace.pid: (trace.domains, trace.strings) for trace in traces},
                                    instrumentation, domains,
                                    {step.label: step.measured_spans for step in summary.steps if step.measured_spans},
                                    found.windows)
        outputs = {}
        if sampled is not None:
            # without operator tasks, the samples tell the step's Python from the framework's time (compute);
            # a loop of Python and numpy alone has no framework: its time stays Python
            frameworks = any(file.frameworks for file in instrumentation.files)
            python = sampled.info.get("python_cpu_s_in_steps", {}) if frameworks else {}
            summary.steps = [replace(step, phases=with_samples(step.phases, python[step.label] / step.phase_steps))
                             if step.label in python and step.phase_steps else step for step in summary.steps]
            summary.sampling, summary.hotspots, summary.hotspot_lines = sampled.info, sampled.hotspots, sampled.lines
            summary.hotspots_by_task, summary.hotspots_outside = sampled.by_task, sampled.outside
            summary.hotspot_lines_outside = sampled.outside_lines
            outputs[FOLDED_FILE] = "".join(line + "\n" for line in sampled.folded)
        script_name = readable(Path(record.script).name)
        summary.unwritten = save_outputs(folder, {
            **outputs,
            "trace.json": lambda out: chrome_trace.write(out, traces, kept, found.groups, script_name,
                                                         summary.trace_window),
            SUMMARY_FILE: json.dumps(summary.to_json(), indent=2) + "\n",
            "steps.svg": step_time_svg(summary.steps, f"Step time, {script_name}", step_marks(
                found.kept, found.groups, labels, domains, instrumentation.tasks, partial=found.limited)),
        })
        summary.warnings.extend(unwritten_warnings(folder, summary.unwritten))
        return summary

    def saved(self, folder: Path) -> Optional[Summary]:
        """summary.json, unless a trace file is newer (a run still writing, or traces replaced) or it is not
        this autoitt's (then it is read again)."""
        path = folder / SUMMARY_FILE
        try:
            written = path.stat().st_mtime_ns
            traces = folder / TRACE_SUBDIR
            if traces.is_dir() and any(p.stat().st_mtime_ns > written for p in traces.iterdir()):
                return None
            return Summary.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def render(self, summary: Summary, console, *, script: str, result_dir: Path,
               instrumentation: Instrumentation, verbose: bool = False) -> None:
        from .render import render

        render(summary, console, script=script, result_dir=result_dir, instrumentation=instrumentation,
               verbose=verbose)


def _why_nothing(traces, skipped, instrumentation: Instrumentation, summary: Summary,
                 exit_code: Optional[int] = None) -> str:
    """The likeliest reason no task of autoitt's markers (or of the script's own) was recorded."""
    if skipped and not traces:
        return "no trace file could be read (see above)"
    entry = instrumentation.entry
    marked = [f"{r['path']}:{r['line']}" for r in instrumentation.regions] if any(
        f.instrumented for f in instrumentation.files) else []
    if marked:
        where = f"{', '.join(marked[:5])}{', ...' if len(marked) > 5 else ''}"
        if exit_code:  # the script's own error (autoitt's are said by autoitt_fault)
            return (f"none of the marked training regions ran ({where}): the script ended with exit code "
                    f"{exit_code} before reaching them (its error is in its output above)")
        return (f"none of the marked training regions ran ({where}): the script stopped before training, or "
                "trained through code autoitt did not mark (`autoitt loops` shows what it found)")
    if entry.outcome == "already instrumented":
        return ("the script's own ITT markers recorded no task: the code that calls them did not run, or "
                "collection was paused around it")
    if not traces:
        return ("no training loop was found to mark (`autoitt loops` shows what was looked at), and no process of "
                "the run made an ITT call (no PyTorch or oneDNN task either)")
    return ("no training loop was found to mark (`autoitt loops` shows what was looked at): "
            + ("the tasks shown are the frameworks' own" if summary.tasks else "and nothing in the run made ITT tasks"))
