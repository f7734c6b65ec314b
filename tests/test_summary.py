"""Each backend's summary type: summary.json's one layout, and reading each backend's JSON back."""

from __future__ import annotations

import json

import pytest

from instrumenter.profile.step_window import StepWindow
from instrumenter.builtin.statistics.summary import BuiltinSummary, StepStats, TaskStats
from instrumenter.profile.read_context import ReadContext
from instrumenter.profile.summary import JSON_FIELDS, json_object
from instrumenter.vtune.collect import AnalysisRun
from instrumenter.vtune.csv_reports import FunctionRow, Metric, ResultReport, TaskRow
from instrumenter.vtune.summary import VTuneAnalysis, VTuneSummary
from tests.contexts import read_context


def builtin_summary() -> BuiltinSummary:
    return BuiltinSummary(elapsed_s=2.0, collected_s=1.0, warnings=["w"], processes=1, threads=2, events=10,
                          tasks=[TaskStats("d", "step", 3, 0.3, 0.1, 0.1, 0.1, 0.1, 0.5)],
                          steps=[StepStats("step", 3, 0.1, 0.1, 0.1, 0.1, 0.1, durations_s=(0.1, 0.1, 0.1))],
                          operators=[], unfinished=0, machine={"cpus": 2.0})


def vtune_summary() -> VTuneSummary:
    report = ResultReport("hotspots", None, elapsed_s=1.5, metrics=[Metric(0, "CPU Time", "CPU Time", 1.2)],
                          tasks=[TaskRow("step", 1.0, {}, {"CPU Time": 1.0})],
                          functions=[FunctionRow("f", 1.0, "m", "f(x)", "train.py", 3, {})])
    run = AnalysisRun("hotspots", "failed", ["vtune", "-collect", "hotspots"], exit_code=1, result_dirs=["hotspots"])
    return VTuneSummary(elapsed_s=1.5, collected_s=1.0, warnings=[], vtune="/opt/vtune",
                        analyses=[VTuneAnalysis(run, [report])], gui=["vtune-gui hotspots"], csv_dir="csv")


def test_a_builtin_summarys_json_has_every_key_in_the_formats_order_with_vtune_null():
    data = builtin_summary().to_json()
    assert list(data) == list(JSON_FIELDS) and data["vtune"] is None
    assert "durations_s" not in data["steps"][0] and "unwritten" not in data


def test_a_builtin_summary_reads_back_from_its_json():
    data = json.loads(json.dumps(builtin_summary().to_json()))
    assert BuiltinSummary.from_json(data).to_json() == data


def test_a_builtin_summary_written_before_the_hotspots_existed_still_reads():
    data = builtin_summary().to_json()
    for key in ("hotspots", "hotspot_lines", "hotspots_by_task", "hotspots_outside", "hotspot_lines_outside",
                "counters", "counter_notes", "sampling"):
        del data[key]
    assert BuiltinSummary.from_json(data).hotspots == []


def test_a_vtune_summarys_json_holds_its_results_under_vtune_and_the_builtin_statistics_empty():
    data = vtune_summary().to_json()
    assert list(data) == list(JSON_FIELDS)
    assert list(data["vtune"]) == ["vtune", "analyses", "gui", "csv_dir"]
    assert data["tasks"] == [] and data["processes"] == 0 and data["sampling"] is None


def test_a_vtune_summary_reads_back_from_its_json():
    data = json.loads(json.dumps(vtune_summary().to_json()))
    back = VTuneSummary.from_json(data)
    assert back.to_json() == data and back.failed == ["hotspots"]


def test_each_backend_refuses_the_others_summary():
    with pytest.raises(ValueError):
        BuiltinSummary.from_json(vtune_summary().to_json())
    with pytest.raises(ValueError):
        VTuneSummary.from_json(builtin_summary().to_json())


def test_the_json_layout_refuses_a_key_outside_the_format():
    with pytest.raises(KeyError):
        json_object({"cpu_s": 1.0})


def test_a_read_context_says_elapsed_unknown_when_the_runs_end_was_not_recorded():
    assert read_context(elapsed_s=None).elapsed_s is None and not read_context(elapsed_s=None).ended
    assert read_context(elapsed_s=3.0).elapsed_s == 3.0


def test_a_read_context_takes_the_recorded_window_unless_given_one():
    context = read_context(trace_steps="2-4")
    assert context.trace_steps == StepWindow(ranges=((2, 4),))
    given = ReadContext.of(context.instrumentation, context.record, StepWindow.parse("all"))
    assert given.trace_steps.everything


def test_a_window_keeps_the_text_it_was_given_for_the_record():
    window = StepWindow.parse(" 2-4,-3")
    assert window.text == " 2-4,-3" and window == StepWindow.parse("2-4,-3")
