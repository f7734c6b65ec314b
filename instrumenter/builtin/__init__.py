"""The built-in backend: autoitt's own ITT collector records every ITT task of the run; no VTune needed.

run: the copy's command (:func:`instrumenter.launch.command`, in its environment) with the collector attached (:mod:`instrumenter.collector`),
each process writing ``itt/itt-<pid>.bin`` (format: :mod:`.trace.tracefile`);
read: traces -> one streaming pass (:mod:`.statistics.aggregate`) -> statistics (:mod:`.statistics.taskstats`),
the timeline's window (:mod:`.statistics.timeline`), ``trace.json`` (:mod:`.output.chrome_trace`), ``steps.svg``
(:mod:`.output.plot`) and ``summary.json``;
render: :mod:`.output.render`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..launch import target
from ..profile.backend import Backend, Finished, Job, Say
from ..profile.machine import RunQueue, Usage, during
from ..profile.console import readable
from .. import launch
from ..profile.instrumentation import FILE as INSTRUMENTATION_FILE
from ..launch.launchers import under_launcher
from ..profile.instrumentation import Instrumentation
from ..profile.results import RUN_FILE, autoitt_fault
from .statistics.summary import BuiltinSummary

if TYPE_CHECKING:  # read_context imports this package's StepWindow
    from ..profile.read_context import ReadContext

#: The collector's per-process files, inside the result folder.
TRACE_SUBDIR = "itt"
#: What a read saves: the summary ``autoitt report`` prints again.
SUMMARY_FILE = "summary.json"
#: The sampled stacks, folded (flame-graph tools, speedscope).
FOLDED_FILE = "hotspots.folded"
#: the run on one offline page (:mod:`.output.html`)
HTML_FILE = "report.html"


class BuiltinBackend(Backend):
    name = "builtin"
    summary_type = BuiltinSummary

    def run(self, job: Job, say: Say) -> Finished:
        from ..collector import environment, mechanism

        say(f"running {job.script} ({job.copy.name}) with the built-in collector; results in {job.folder}/")
        env = launch.environment(os.environ, job.script, job.folder / INSTRUMENTATION_FILE)
        own = job.options.builtin
        env.update(environment(job.folder / TRACE_SUBDIR, job.instrumentation.start_paused, own.trace_limit,
                               own.sample_hz, job.instrumentation.domains))
        sampling = job.options.operator_sampling
        if sampling is not None:  # the copies' runtime reads it (without it, the default policy)
            env.update(sampling.environment())
        chosen = None
        if own.sample_hz != 0:  # None: auto, the rate chosen with the mechanism
            chosen = mechanism.choose(env, rate_given=own.sample_hz is not None)
            env.update(chosen.environment())
            if chosen.mechanism == "timer":
                say(f"sampling: {chosen.why}")
        started, started_at = time.perf_counter(), time.time()
        before = Usage.now()
        # --json keeps autoitt's stdout for the summary: the script prints to stderr.
        # the script's own arguments follow the .pyc in the command (deepspeed's --local_rank goes there)
        args_at = job.command.index(str(launch.main_file(job.folder / INSTRUMENTATION_FILE, job.script))) + 1
        command = list(under_launcher(job.options.launcher, job.command, args_at=args_at))
        # the run queue's thread is started after the target, so that it blocks the signals passed on (target.py)
        running = target.start(command, env=env, stdout=sys.stderr.fileno() if job.options.json_output else None)
        with RunQueue() as queue:
            exit_code = target.wait(running)
        elapsed = time.perf_counter() - started
        return Finished(exit_code, elapsed, started_at, during(before, Usage.now(), elapsed, queue.mean()),
                        chosen.to_json() if chosen is not None else None)

    def read(self, folder: Path, context: ReadContext) -> BuiltinSummary:
        """Read the traces once, for the statistics and the timeline, and the samples for the hotspots; write
        trace.json, summary.json, steps.svg and hotspots.folded (when samples were taken) where the folder can be
        written: a read-only result folder is still summarized."""
        from ..profile.results import save_outputs, unwritten_warnings
        from .output import chrome_trace
        from .statistics.aggregate import aggregate
        from .output.html import report_html
        from .output.plot import step_time_svg
        from .statistics.step_marks import step_marks
        from .statistics.ranks import rank_stats, stragglers
        from .statistics.taskstats import cut_steps, run_split, summarize
        from .statistics.counters import counter_notes, task_counters, uncollected
        from .samples.samplefile import read_sample_dir
        from .samples.sampling import summarize_samples
        from .trace.scan import scan_trace_dir
        from .statistics.timeline import keep_policy, timeline
        from .statistics.compiled import graph_labels
        from .samples.stacks import Resolver
        from .statistics.phases import with_samples
        from dataclasses import replace

        import numpy as np

        record, instrumentation, domains = context.record, context.instrumentation, context.domains
        trace_dir = folder / TRACE_SUBDIR
        scans, skipped = scan_trace_dir(trace_dir) if trace_dir.is_dir() else ([], [])
        traces = [trace for trace, _blocks in scans]
        found = aggregate(scans, domains, keep_policy(context.trace_steps), instrumentation.start_paused,
                          context.step_labels)
        base = summarize(found, context)
        labels = graph_labels(traces, found.kept if found.kept_everything else found.window, found.groups,
                              Resolver(instrumentation).file_name)
        base = replace(base, operators=[replace(op, label=labels.get(op.name, op.label)) for op in base.operators])
        steps = cut_steps(base.steps, found.kept, found.groups, context, [trace.pid for trace in traces if trace.cut])
        warnings = list(base.warnings)
        if not context.ended:
            warnings.append(f"the run's end was not recorded in {RUN_FILE} (autoitt was stopped before the "
                            "run ended, or could not write it): its elapsed time and exit code are unknown")
        ranks = rank_stats(traces, found.kept, found.groups, context)
        warnings.extend(skipped)
        fault = autoitt_fault(folder)
        if fault:
            warnings.append(fault)
        elif not any(task.domain in domains for task in base.tasks):
            warnings.append(_why_nothing(traces, skipped, instrumentation, base, record.exit_code))
        kept, trace_window = timeline(found, context)
        sampled = summarize_samples(read_sample_dir(trace_dir) if trace_dir.is_dir() else [],
                                    {trace.pid: (trace.domains, trace.strings) for trace in traces},
                                    instrumentation, domains,
                                    {step.label: step.measured_spans for step in steps if step.measured_spans},
                                    found.windows)
        outputs, samples = {}, {}
        if sampled is not None:
            # without operator tasks, the samples tell the step's Python from the framework's time (compute);
            # a loop of Python and numpy alone has no framework: its time stays Python
            frameworks = any(file.frameworks for file in instrumentation.files)
            python = sampled.info.get("python_cpu_s_in_steps", {}) if frameworks else {}
            # the step loops whose phases the samples split: those with sampled Python and phases without
            # operator tasks (``compute``)
            split = {step.label for step in steps if step.label in python and step.phase_steps
                     and "compute" in step.phases and "python" in step.phases}
            steps = [replace(step, phases=with_samples(step.phases, python[step.label] / step.phase_steps))
                     if step.label in split else step for step in steps]
            info = dict(sampled.info, mechanism_why=record.sample_mechanism["why"]) if record.sample_mechanism \
                else dict(sampled.info)
            # the steps' sampled CPU where it split them: the summary says when that is too few samples to split
            # them closely
            info["phase_split_cpu_s"] = {label: cpu for label, cpu in sampled.info.get("cpu_s_in_steps", {}).items()
                                         if label in split}
            samples = dict(sampling=info, hotspots=sampled.hotspots, hotspot_lines=sampled.lines,
                           hotspots_by_task=sampled.by_task, hotspots_outside=sampled.outside,
                           hotspot_lines_outside=sampled.outside_lines)
            outputs[FOLDED_FILE] = "".join(line + "\n" for line in sampled.folded)
        summary = replace(base, steps=steps, warnings=warnings, run_split=run_split(traces, found.windows, record),
                          machine=record.machine, ranks=ranks, stragglers=stragglers(ranks), trace_window=trace_window,
                          counters=task_counters(traces, found, domains), counter_notes=counter_notes(traces),
                          uncollected=uncollected(traces),
                          **samples)
        script_name = readable(Path(record.script).name)
        # with ranks, a line per rank; the marks of the first's steps
        svg = step_time_svg(steps, f"Step time, {script_name}",
                            step_marks(found.kept if not ranks else found.kept.take(np.isin(found.kept.pid, ranks[0].pids)),
                                       found.groups, context, partial=found.limited), ranks)
        unwritten = save_outputs(folder, {
            **outputs,
            "trace.json": lambda out: chrome_trace.write(out, traces, kept, found.groups, script_name, trace_window),
            SUMMARY_FILE: json.dumps(summary.to_json(), indent=2) + "\n",
            "steps.svg": svg,
            HTML_FILE: report_html(summary, script=record.script, result_dir=folder, instrumentation=instrumentation,
                                   svg=svg, folded=sampled.folded if sampled is not None else ()),
        })
        return replace(summary, warnings=[*warnings, *unwritten_warnings(folder, unwritten)], unwritten=unwritten)

    def saved(self, folder: Path) -> Optional[BuiltinSummary]:
        """summary.json, unless a trace file is newer (a run still writing, or traces replaced) or it is not
        this autoitt's (then it is read again)."""
        path = folder / SUMMARY_FILE
        try:
            written = path.stat().st_mtime_ns
            traces = folder / TRACE_SUBDIR
            if traces.is_dir() and any(p.stat().st_mtime_ns > written for p in traces.iterdir()):
                return None
            return BuiltinSummary.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def render(self, summary: BuiltinSummary, console, *, script: str, result_dir: Path,
               instrumentation: Instrumentation, verbose: bool = False) -> None:
        from .output.render import render

        render(summary, console, script=script, result_dir=result_dir, instrumentation=instrumentation,
               verbose=verbose)


def _why_nothing(traces, skipped, instrumentation: Instrumentation, summary: BuiltinSummary,
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
