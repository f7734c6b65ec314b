"""``vtune -report`` in CSV: running the reports, and reading every shape they come in.

Shapes, from real outputs (see the research notes on VTune's CLI):

* ``summary``: ``Hierarchy Level,Metric Name,Metric Value``, rows like
  ``0,Elapsed Time,149.771137`` and ``1,CPI Rate,0.665470``; a level counts
  nesting (``Back-End Bound`` > ``Memory Bound`` > ``L1 Bound``); values can be
  text (``N/A with HT on``); nested tables show up inline with extra columns.
  Metrics are keyed on their name, never on their row.
* ``hotspots -group-by task``: ``Task Type;CPU Time`` then
  ``convolution;1451.459338`` and ``[Outside any task];280.489764``; with
  ``-column`` the output starts with the line ``Column filter is ON.``. On a
  uarch-exploration result the columns are top-down metrics such as
  ``Front-End Bound(%)`` and ``Back-End Bound:Memory Bound:L1 Bound(%)``.
* ``hotspots -group-by function``: ``Function,CPU Time,...,Module,Function
  (Full),Source File,Start Address``; seconds are bare numbers, cells can be
  empty, names with commas are quoted.

Bottom-up columns have no ``:Self`` suffix, but ``-column`` listings show
``CPU Time:Self``; both are accepted. Anything before the header row (the
column filter notice, a progress line) is skipped.
"""

from __future__ import annotations

import csv
import io
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

Value = Union[float, str, None]

#: Top-down level 1, in VTune's order.
TOP_DOWN = ("Retiring", "Front-End Bound", "Bad Speculation", "Back-End Bound")
_CPU_TIME = ("CPU Time", "CPU Time:Self")


class ReportFormatError(ValueError):
    """A report without the header row its type always has."""


@dataclass(frozen=True)
class Metric:
    level: int
    name: str
    #: The names from level 0 down to this one, joined by ``:`` as VTune names columns.
    path: str
    value: Value


@dataclass(frozen=True)
class TaskRow:
    task: str
    cpu_time_s: Optional[float]
    #: Top-down level 1 in percent, where the report has it (uarch-exploration).
    top_down: Dict[str, float]
    #: Every column but the task's name, as read.
    columns: Dict[str, Value]


@dataclass(frozen=True)
class FunctionRow:
    function: str
    cpu_time_s: Optional[float]
    module: Optional[str]
    full_name: Optional[str]
    source_file: Optional[str]
    source_line: Optional[int]
    columns: Dict[str, Value]


@dataclass
class ResultReport:
    """What one VTune result folder (one analysis, one rank or host) says."""

    name: str
    rank: Optional[str]
    elapsed_s: Optional[float] = None
    cpu_time_s: Optional[float] = None
    paused_s: Optional[float] = None
    top_down: Dict[str, float] = field(default_factory=dict)
    bandwidth: Dict[str, Value] = field(default_factory=dict)
    metrics: List[Metric] = field(default_factory=list)
    tasks: List[TaskRow] = field(default_factory=list)
    functions: List[FunctionRow] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)


def parse_value(cell: Optional[str]) -> Value:
    """``""`` -> None, ``"1.5"`` or ``"12.5%"`` -> a float, anything else (``N/A``) stays text."""
    text = (cell or "").strip()
    if not text:
        return None
    try:
        return float(text[:-1] if text.endswith("%") else text)
    except ValueError:
        return text


def _number(value: Value) -> Optional[float]:
    return value if isinstance(value, float) else None


def _table(text: str, delimiter: str, key: str) -> Tuple[List[str], List[Dict[str, str]]]:
    """The header row (the first row with a cell ``key``) and the rows after it, as dicts."""
    rows = csv.reader(io.StringIO(text), delimiter=delimiter)
    for row in rows:
        header = [cell.strip() for cell in row]
        if key in header:
            break
    else:
        raise ReportFormatError(f"no header row with a {key!r} column")
    records = []
    for row in rows:
        if not any(cell.strip() for cell in row):
            continue
        padded = row + [""] * (len(header) - len(row))
        records.append(dict(zip(header, padded)))
    return header, records


def _first(record: Dict[str, str], names: Iterable[str]) -> Value:
    for name in names:
        if name in record:
            return parse_value(record[name])
    return None


def parse_summary(text: str, delimiter: str = ",") -> List[Metric]:
    _, records = _table(text, delimiter, "Metric Name")
    metrics = []
    parents: List[str] = []
    for record in records:
        try:
            level = int(record.get("Hierarchy Level", "0").strip() or 0)
        except ValueError:
            continue  # a row of a nested table
        name = record["Metric Name"].strip()
        if not name:
            continue
        del parents[level:]
        parents += [""] * (level - len(parents))  # a level whose parent row is missing
        parents.append(name)
        metrics.append(Metric(level, name, ":".join(p for p in parents if p), parse_value(record.get("Metric Value"))))
    return metrics


def metric(metrics: Sequence[Metric], name: str) -> Value:
    """The value of the first metric with this name (or path)."""
    for item in metrics:
        if name in (item.name, item.path):
            return item.value
    return None


def _top_down(record: Dict[str, str]) -> Dict[str, float]:
    found = {}
    for category in TOP_DOWN:
        value = _first(record, (f"{category}(%)", category, f"{category}:Self", f"{category}(%):Self"))
        if isinstance(value, float):
            found[category] = value
    return found


def parse_tasks(text: str, delimiter: str = ",") -> List[TaskRow]:
    _, records = _table(text, delimiter, "Task Type")
    return [TaskRow(task=record["Task Type"], cpu_time_s=_number(_first(record, _CPU_TIME)),
                    top_down=_top_down(record),
                    columns={k: parse_value(v) for k, v in record.items() if k != "Task Type"})
            for record in records]


_FUNCTION_FIELDS = ("Function", "Module", "Function (Full)", "Source File", "Source Line")


def parse_functions(text: str, delimiter: str = ",") -> List[FunctionRow]:
    _, records = _table(text, delimiter, "Function")
    rows = []
    for record in records:
        line = _number(parse_value(record.get("Source Line")))
        rows.append(FunctionRow(
            function=record["Function"], cpu_time_s=_number(_first(record, _CPU_TIME)),
            module=record.get("Module") or None, full_name=record.get("Function (Full)") or None,
            source_file=record.get("Source File") or None, source_line=int(line) if line else None,
            columns={k: parse_value(v) for k, v in record.items() if k not in _FUNCTION_FIELDS}))
    return rows


def read_result(name: str, rank: Optional[str], csv_files: Dict[str, Path], delimiter: str = ",") -> ResultReport:
    """Parse the CSVs saved for one result folder; a missing or unreadable one becomes a problem, not an error."""
    report = ResultReport(name=name, rank=rank)
    for kind, parse in (("summary", parse_summary), ("tasks", parse_tasks), ("functions", parse_functions)):
        path = csv_files.get(kind)
        if path is None:
            continue
        try:
            parsed = parse(path.read_text(encoding="utf-8", errors="replace"), delimiter)
        except (OSError, ReportFormatError) as exc:
            report.problems.append(f"{path.name}: {exc.strerror if isinstance(exc, OSError) else exc}")
            continue
        setattr(report, "metrics" if kind == "summary" else kind, parsed)
    report.elapsed_s = _number(metric(report.metrics, "Elapsed Time"))
    report.cpu_time_s = _number(metric(report.metrics, "CPU Time"))
    report.paused_s = _number(metric(report.metrics, "Paused Time"))
    report.top_down = {name: value for name in TOP_DOWN
                       if isinstance(value := metric(report.metrics, name), float)}
    report.bandwidth = {m.name: m.value for m in report.metrics if "Bandwidth" in m.name}
    report.tasks.sort(key=_task_weight, reverse=True)
    report.functions.sort(key=lambda row: -(row.cpu_time_s or 0.0))
    return report


def _task_weight(row: TaskRow) -> float:
    """CPU time; a uarch-exploration report has none, so its clockticks."""
    if row.cpu_time_s is not None:
        return row.cpu_time_s
    return _number(row.columns.get("Clockticks")) or 0.0


def run_report(command: List[str], output: Path) -> Optional[str]:
    """Run one ``vtune -report`` into ``output``; returns what went wrong, or None."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace")
    except OSError as exc:
        return f"cannot run {command[0]}: {exc.strerror or exc}"
    if done.returncode == 0 and output.is_file():
        return None
    said = error_lines(done.stdout + done.stderr) or (done.stdout + done.stderr).strip().splitlines()[-1:]
    return f"`vtune -report` exited with code {done.returncode}" + (f": {' '.join(said)}" if said else "")


def error_lines(output: str) -> List[str]:
    """VTune's own ``vtune: Error:`` (and ``vtune: Fatal error:``) lines, in order, once each."""
    return _vtune_lines(output, ("vtune: Error:", "vtune: Fatal error:"))


def warning_lines(output: str) -> List[str]:
    return _vtune_lines(output, ("vtune: Warning:",))


def _vtune_lines(output: str, prefixes: Tuple[str, ...]) -> List[str]:
    found: List[str] = []
    for line in output.replace("\r", "\n").splitlines():
        line = line.strip()
        if line.startswith(prefixes) and line not in found:
            found.append(line)
    return found
