"""The VTune backend's summary: per analysis, how it went and what each result folder's reports say.

:class:`VTuneSummary` is the VTune backend's
:class:`~instrumenter.profile.summary.Summary`. Its JSON is the common
``summary.json`` object with its results under ``vtune`` (the built-in
backend's statistics empty: CPU time per task is not the same kind of figure
as wall time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import List

from ..profile.summary import Summary, json_object
from .collect import AnalysisRun
from .csv_reports import FunctionRow, Metric, ResultReport, TaskRow


@dataclass
class VTuneAnalysis:
    run: AnalysisRun
    results: List[ResultReport]

    @classmethod
    def from_json(cls, data: dict) -> "VTuneAnalysis":
        def report(item: dict) -> ResultReport:
            return ResultReport(**{**item, "metrics": [Metric(**m) for m in item["metrics"]],
                                   "tasks": [TaskRow(**t) for t in item["tasks"]],
                                   "functions": [FunctionRow(**f) for f in item["functions"]]})

        return cls(AnalysisRun(**data["run"]), [report(item) for item in data["results"]])


#: The keys of the object under ``vtune`` in ``summary.json``, in their order.
_PART = ("vtune", "analyses", "gui", "csv_dir")


@dataclass(kw_only=True)
class VTuneSummary(Summary):
    """What VTune's analyses of a run found (``elapsed_s``: VTune's figure, else the run's)."""

    #: the vtune executable that ran
    vtune: str
    analyses: List[VTuneAnalysis]
    #: How to open each result folder in the GUI.
    gui: List[str]
    csv_dir: str

    @property
    def failed(self) -> List[str]:
        return [a.run.analysis for a in self.analyses if a.run.status == "failed"]

    def to_json(self) -> dict:
        return json_object({"elapsed_s": self.elapsed_s, "collected_s": self.collected_s,
                            "warnings": list(self.warnings),
                            "vtune": {"vtune": self.vtune, "analyses": [asdict(a) for a in self.analyses],
                                      "gui": list(self.gui), "csv_dir": self.csv_dir}})

    @classmethod
    def from_json(cls, data: dict) -> "VTuneSummary":
        part = data["vtune"]
        if not isinstance(part, dict):
            raise ValueError("the built-in backend's summary, not a VTune run's")
        return cls(elapsed_s=data["elapsed_s"], collected_s=data["collected_s"], warnings=list(data["warnings"]),
                   vtune=part["vtune"], analyses=[VTuneAnalysis.from_json(a) for a in part["analyses"]],
                   gui=list(part["gui"]), csv_dir=part["csv_dir"])
