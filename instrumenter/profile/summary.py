"""The summary of a profile: what every backend reports, and the ``--json`` contract they share.

Each backend has its own summary type, a :class:`Summary`: the built-in
backend's :class:`~instrumenter.builtin.statistics.summary.BuiltinSummary` (task, step
and operator statistics: wall time, from ITT events), the VTune backend's
:class:`~instrumenter.vtune.summary.VTuneSummary` (CPU time and top-down
metrics per task, per analysis: not the same kind of figure). What the
command line uses of any summary is here: its elapsed and collected time, its
warnings, the files its reading could not write, and its JSON.

``summary.json`` and ``--json`` are :meth:`Summary.to_json`, one object whose
keys are :data:`JSON_FIELDS`, always all of them and in that order (the
format predates per-backend summaries): a backend writes its own and
:func:`json_object` the others' empty values. A backend reads its own back
with its type's :meth:`Summary.from_json`. Times are seconds.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:
    from .results import Unwritten

#: ``summary.json``'s keys in their order, each with what a summary that does not report it writes. The
#: built-in backend's come first; ``vtune`` holds the VTune backend's results.
JSON_FIELDS: Dict[str, Any] = {
    "elapsed_s": None, "collected_s": 0.0, "processes": 0, "threads": 0, "events": 0, "tasks": [], "steps": [],
    "operators": [], "unfinished": 0, "warnings": [], "thread_time_s": 0.0, "ranks": [], "stragglers": [],
    "trace_window": None, "run_split": None, "machine": None, "vtune": None, "sampling": None, "hotspots": [],
    "hotspot_lines": [], "hotspots_by_task": {}, "hotspots_outside": [], "hotspot_lines_outside": [],
    "counters": {}, "counter_notes": [], "uncollected": {}, "operator_sampling": None,
}


def json_object(values: Dict[str, Any]) -> Dict[str, Any]:
    """``summary.json``'s object: every key of :data:`JSON_FIELDS` in its order, its value in ``values`` or
    else the empty one. A key outside the format is a programming error (``KeyError``)."""
    unknown = set(values) - set(JSON_FIELDS)
    if unknown:
        raise KeyError(f"not summary.json keys: {', '.join(sorted(unknown))}")
    return {key: values[key] if key in values else copy.copy(empty) for key, empty in JSON_FIELDS.items()}


@dataclass(kw_only=True)
class Summary(ABC):
    """What every backend reports of a run."""

    #: the run's wall time; None when its end was not recorded (autoitt was killed: run.json says it never ended)
    elapsed_s: Optional[float]
    #: the time collection ran (not paused)
    collected_s: float
    warnings: List[str]
    #: the output files of this reading that could not be written (:class:`instrumenter.profile.results.Unwritten`: a
    #: full disk, a read-only folder); never saved: a summary saved was written
    unwritten: List["Unwritten"] = field(default_factory=list, repr=False, compare=False)

    @abstractmethod
    def to_json(self) -> dict:
        """``summary.json``'s object (:func:`json_object`): statistics only, small however long the run."""

    @classmethod
    @abstractmethod
    def from_json(cls, data: dict) -> "Summary":
        """The summary :meth:`to_json` gave (or an earlier autoitt's, where its shape allows).

        Raises ``KeyError``/``TypeError``/``ValueError`` on JSON of another shape.
        """
