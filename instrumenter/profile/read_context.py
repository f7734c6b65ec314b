"""What every reading of a run's results needs, built once from the result folder's two records.

``instrumentation.json`` (:class:`~instrumenter.profile.instrumentation.Instrumentation`:
what the rewrite decided) and ``run.json``
(:class:`~instrumenter.profile.results.RunRecord`: how the run went) hold the facts;
:meth:`ReadContext.of` derives what the readers use from them (the step
labels, the own domains, the first step's number, the regions' task names, whether the
run's end was recorded) once, and a backend's ``read`` hands the one context
to its readers instead of each deriving them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from transforms import RegionTasks

from ..runtime.torch_ops import OperatorSampling
from .step_window import AUTO, StepWindow
from .instrumentation import Instrumentation
from .results import RunRecord


@dataclass(frozen=True)
class ReadContext:
    """One run's records and the facts its readers take from them (:meth:`of` builds it)."""

    instrumentation: Instrumentation
    record: RunRecord
    #: the task names of step iterations (every file's, sorted)
    step_labels: Tuple[str, ...]
    #: every domain the run's markers record on: autoitt's and the scripts' own
    domains: Tuple[str, ...]
    #: the run's number of its first collected step (``--skip-steps N``: N + 1), counted across epochs
    first_step: int
    #: the task names of every marked region (``instrumentation.json``'s ``tasks``): what tells epochs and
    #: evaluations
    tasks: Tuple[RegionTasks, ...]
    #: the run's wall time; None when its end was not recorded (autoitt was killed: run.json says it never ended)
    elapsed_s: Optional[float]
    #: ``--trace-steps``: the steps whose every task trace.json keeps (built-in backend)
    trace_steps: StepWindow = AUTO
    #: ``--torch-ops sampled``: which iterations of :attr:`operators_in` recorded PyTorch's operators; None
    #: where every iteration did (or none, or no copy sampled: a script without PyTorch)
    operator_sampling: Optional[OperatorSampling] = None
    #: the iteration tasks whose sampled iterations recorded PyTorch's operators (empty: see above)
    operators_in: Tuple[str, ...] = ()

    @classmethod
    def of(cls, instrumentation: Instrumentation, record: RunRecord,
           trace_steps: Optional[StepWindow] = None) -> "ReadContext":
        """The context of a run; ``trace_steps``: the window as parsed with the options (``profile``, ``report
        --trace-steps``), else the one ``run.json`` recorded."""
        # a run whose end was never recorded (autoitt was killed while it ran) has no elapsed time: not 0
        ended = record.elapsed_s > 0 or record.exit_code is not None
        return cls(instrumentation=instrumentation, record=record,
                   step_labels=tuple(instrumentation.step_labels), domains=tuple(instrumentation.domains),
                   first_step=record.first_step, tasks=tuple(instrumentation.tasks),
                   elapsed_s=record.elapsed_s if ended else None,
                   trace_steps=trace_steps if trace_steps is not None else StepWindow.parse(record.trace_steps),
                   **_operator_sampling(instrumentation, record))

    @property
    def ended(self) -> bool:
        """Whether ``run.json`` recorded the run's end (its exit code and elapsed time)."""
        return self.elapsed_s is not None


def _operator_sampling(instrumentation: Instrumentation, record: RunRecord) -> dict:
    """The policy the run sampled operators with, where a copy did (a script without PyTorch samples none)."""
    names = tuple(instrumentation.operators_in)
    if not names or not record.operator_sampling:
        return {}
    return {"operator_sampling": OperatorSampling.from_json(record.operator_sampling), "operators_in": names}
