"""A run's :class:`~instrumenter.profile.read_context.ReadContext` for the readers' tests, built as ``autoitt report``
builds one: from the two records of a result folder (here made in memory, not read from files)."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from instrumenter.profile.instrumentation import FileRecord, Instrumentation
from instrumenter.profile.read_context import ReadContext
from instrumenter.profile.results import RunRecord
from transforms import LineMap, RegionTasks


def read_context(step_labels: Iterable[str] = ("step",), domains: Sequence[str] = ("autoitt.train",),
                 tasks: Iterable[RegionTasks] = (), trace_steps: str = "auto", elapsed_s: Optional[float] = 1.0,
                 first_step: int = 1, operators_in: Iterable[str] = (), operator_sampling: Optional[dict] = None
                 ) -> ReadContext:
    """One instrumented script marking on ``domains[0]`` (the others its own ITT domains) with ``step_labels``
    and its regions' ``tasks``; a run that ended (exit 0) after ``elapsed_s`` (None: its end not recorded);
    ``operators_in`` and ``operator_sampling``: a copy made with ``--torch-ops sampled`` and the rule its run
    recorded (:meth:`~instrumenter.runtime.torch_ops.OperatorSampling.to_json`)."""
    script = FileRecord(path="/w/train.py", relative="train.py", module=None, runs="/r/train_itt.py",
                        outcome="instrumented", domain=domains[0], own_domains=tuple(domains[1:]),
                        step_labels=tuple(step_labels), runtime=(), sha256="", regions=(),
                        line_map=LineMap.identity(10), tasks=tuple(tasks), operators_in=tuple(operators_in))
    ended = {} if elapsed_s is None else {"elapsed_s": elapsed_s, "exit_code": 0}
    record = RunRecord(script="train.py", copy="train_itt.py", args=[], backend="builtin", command=[],
                       trace_steps=trace_steps, first_step=first_step, operator_sampling=operator_sampling, **ended)
    return ReadContext.of(Instrumentation(script="train.py", start_paused=True, files=(script,)), record)
