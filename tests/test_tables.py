"""The summary's tables never cut a number: at 80 and 120 columns in a real terminal (tmux), through a pipe,
and in report.html, where the summary is HTML tables.

One real run of the PyTorch sample; its summary is printed again by ``autoitt report`` each way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.test_profile import SAMPLES, autoitt

#: A figure cut by rich: digits (and a unit's first letters) then the ellipsis.
CUT = re.compile(r"[0-9][0-9.,]*\s?[a-zµ%]*…")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables") / "out"
    done = autoitt("profile", "-r", str(folder), str(SAMPLES / "torch_train.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _piped(folder: Path, columns=None) -> str:
    done = autoitt("report", str(folder), env={"COLUMNS": columns} if columns else {"COLUMNS": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _in_tmux(folder: Path, columns: int, scratch: Path) -> str:
    """What a terminal of ``columns`` columns shows of ``autoitt report``, every line of it."""
    tmux = shutil.which("tmux")
    assert tmux, "no tmux on PATH: scripts/debian_tools.sh installs Debian's package (make test runs it)"
    socket = f"autoitt-{uuid.uuid4().hex[:8]}"
    (scratch / "tmux.conf").write_text("set-option -g history-limit 10000\n")
    # the pane stays after the report (the shell sleeps) so that it can be read
    command = f"{sys.executable} -m instrumenter report {folder}; tmux -L {socket} wait-for -S done; sleep 600"
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    base = [tmux, "-L", socket, "-f", str(scratch / "tmux.conf")]
    try:
        subprocess.run(base + ["new-session", "-d", "-x", str(columns), "-y", "50", command],
                       env={**environment, "TERM": "xterm-256color"}, check=True, timeout=60)
        subprocess.run(base + ["wait-for", "done"], check=True, timeout=300)
        shown = subprocess.run(base + ["capture-pane", "-p", "-S", "-10000"], capture_output=True, text=True,
                               check=True, timeout=30).stdout
    finally:
        subprocess.run(base + ["kill-server"], capture_output=True, timeout=30)
    return shown


def _tables(text: str) -> list:
    """The rows of the summary's tables: the lines under a heading's rule."""
    rows, inside = [], False
    for line in text.splitlines():
        if set(line.strip()) == {"─"}:
            inside = True
        elif not line.strip() or not line.startswith(" "):
            inside = False
        elif inside:
            rows.append(line)
    return rows


def _assert_whole(text: str, columns: int) -> None:
    rows = _tables(text)
    assert rows, text
    assert not [row for row in rows if CUT.search(row)], "\n".join(row for row in rows if CUT.search(row))
    assert max(len(line.rstrip()) for line in text.splitlines()) <= columns


@pytest.mark.parametrize("columns", [80, 120])
def test_no_number_is_cut_in_a_real_terminal(result, columns, tmp_path):
    _assert_whole(_in_tmux(result, columns, tmp_path), columns)


@pytest.mark.parametrize("columns", ["80", None])
def test_no_number_is_cut_through_a_pipe(result, columns):
    _assert_whole(_piped(result, columns), int(columns or 120))


def test_a_pipe_takes_its_width_from_columns(result):
    assert max(len(line) for line in _piped(result, "200").splitlines()) > 120


def test_every_figure_of_your_code_keeps_its_unit_at_80_columns(result):
    text = _piped(result, "80")
    lines = [row for row in _tables(text) if re.match(r"\s+torch_train\.py:\d+", row)]
    assert lines
    for row in lines:
        figures = re.findall(r"\d[\d.,]*(?: ?(?:ms|µs|s)|%)?(?=\s|$)", row.split(".py:", 1)[1])
        assert figures and all(re.search(r"(ms|µs|s|%)$", figure) for figure in figures[-3:]), row


class _Cells(HTMLParser):
    """The summary's tables in report.html: (caption, cells) per table."""

    def __init__(self) -> None:
        super().__init__()
        self.tables, self.depth, self.cell = [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("class", "summary") in attrs:
            self.tables.append([])
        elif tag in ("td", "th") and self.tables:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def test_report_html_shows_the_summary_as_tables_with_whole_numbers(result):
    parser = _Cells()
    parser.feed((result / "report.html").read_text())
    assert len(parser.tables) >= 3  # phases, operators, hotspots, your code
    cells = [cell for table in parser.tables for cell in table]
    assert not [cell for cell in cells if CUT.search(cell)]
    assert not any("\n" in cell for cell in cells), "a cell is one value, not a terminal's wrapped lines"


def test_the_header_counts_the_processes_and_threads_the_samples_saw():
    # 1 process and 1 thread ran tasks; the samples saw 3 processes (DataLoader workers) and 5 threads
    from dataclasses import replace

    from rich.console import Console

    from instrumenter.builtin.output.render import render
    from tests.test_torch_ops import sampled_trace, summary_of

    summary = replace(summary_of(sampled_trace([100] * 5, {2})), sampling={"processes_sampled": 3, "threads": 5})
    console = Console(record=True, width=200)
    render(summary, console, script="train.py", result_dir=Path("out"), instrumentation=None)
    header = console.export_text().splitlines()[1]
    assert "1 process(es), 1 thread(s) with tasks" in header and "; sampled: 3 process(es), 5 thread(s)" in header


def test_a_phase_too_small_to_draw_is_still_named_with_its_time():
    # a manual SGD update of 0.4 % of the step: no bar, but never dropped without a word
    from dataclasses import replace

    from rich.console import Console

    from instrumenter.builtin.output.render import render
    from tests.test_torch_ops import sampled_trace, summary_of

    summary = summary_of(sampled_trace([100] * 5, {2}))
    phases = {"forward": {"seconds_per_step": 0.0996, "share": 0.996},
              "optimizer": {"seconds_per_step": 0.0004, "share": 0.004}}
    summary = replace(summary, steps=[replace(step, phases=phases, phase_steps=3) for step in summary.steps])
    console = Console(record=True, width=200)
    render(summary, console, script="train.py", result_dir=Path("out"), instrumentation=None)
    text = console.export_text()
    assert "under 0.5 % of the step, not drawn: optimizer 400.0 µs per step" in text
