"""Collecting with VTune: hotspots, then uarch-exploration, each read back into CSV right after it.

Each analysis runs the copy through the same launcher as the built-in
backend, under ``vtune -collect`` (inside ``--launcher`` when given, one vtune
per rank), with argument lists (a shell only under torchrun: see
:func:`.commands.per_rank`). What VTune and the script print is shown live
and kept in ``vtune-<analysis>.log``.

Telling a failing script from a failing VTune: VTune returns its own exit code
(``-return-app-exitcode`` would make it return the script's, but then a
failing VTune and a failing script look alike, and that option is documented
only recently). So the launcher writes the script's exit code to
``exit/<analysis>/<pid>`` (``AUTOITT_EXIT_DIR``), one file per process
(per rank). Then, per analysis:

* a process of the script exited non-zero: the script failed (its code becomes
  autoitt's); later analyses are not run, since they would fail the same way;
* else VTune exited non-zero or left no result folder: VTune failed; its
  ``vtune: Error:`` lines and what the user can do are shown, and the other
  analyses still run and are reported;
* else the analysis completed.

After each collection every result folder (``<results>/hotspots``, and
``hotspots.*``: the per-rank or per-host folders VTune makes under MPI, the
per-rank ones autoitt names under torchrun) is read back with ``vtune
-report`` into ``csv/<folder>-<report>.csv``. What happened is saved in
``vtune.json``, so ``autoitt report`` rebuilds the summary from the saved
CSVs without VTune.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..launch import target
from ..sources.files import atomic_write
from .. import launch
from ..profile.instrumentation import FILE as INSTRUMENTATION_FILE
from ..launch import EXIT_DIR_VARIABLE
from .commands import REPORTS, VTuneConfig, collect_command, report_command
from .csv_reports import error_lines, run_report, warning_lines

RUN_FILE = "vtune.json"
CSV_DIR = "csv"
EXIT_DIR = "exit"


@dataclass
class AnalysisRun:
    """How one analysis went; saved in vtune.json."""

    analysis: str
    #: "ok", "failed" (VTune), "script-failed", or "not-run" (after the script failed).
    status: str
    command: List[str]
    exit_code: Optional[int] = None  # VTune's own (or the launcher's)
    script_exit_codes: List[int] = field(default_factory=list)  # one per process that reported
    errors: List[str] = field(default_factory=list)  # VTune's `vtune: Error:` lines
    warnings: List[str] = field(default_factory=list)
    hints: List[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    result_dirs: List[str] = field(default_factory=list)  # folder names inside the result folder
    report_problems: List[str] = field(default_factory=list)

    @property
    def script_exit_code(self) -> Optional[int]:
        """The first non-zero code a process of the script reported; 0 if all were 0; None if none reported."""
        return next((code for code in self.script_exit_codes if code), 0 if self.script_exit_codes else None)


# -- collection ---------------------------------------------------------------------------------------------------

def run(config: VTuneConfig, folder: Path, say, stdout_to_stderr: bool = False) -> List[AnalysisRun]:
    """Run every chosen analysis in order, reading each back right after it; saves vtune.json as it goes."""
    runs: List[AnalysisRun] = []
    for analysis in config.options.analyses:
        command = collect_command(config, analysis)
        failed_before = next((r for r in runs if r.status == "script-failed"), None)
        if failed_before is not None:
            runs.append(AnalysisRun(analysis, "not-run", command, hints=[
                f"the script failed under {failed_before.analysis}"]))
            continue
        say(f"VTune {analysis}: {shlex.join(command)}")
        outcome = _collect(config, analysis, command, folder, stdout_to_stderr)
        say(f"VTune {analysis}: {_status_line(outcome)}")
        _read_back(config, outcome, folder)
        runs.append(outcome)
        save(folder, config.vtune, runs)
    save(folder, config.vtune, runs)
    return runs


def script_exit_code(runs: List[AnalysisRun]) -> Optional[int]:
    """The script's exit code over all analyses: the first failure, else 0, else None (it never reported)."""
    codes = [r.script_exit_code for r in runs if r.script_exit_code is not None]
    return next((code for code in codes if code), 0 if codes else None)


def _status_line(run: AnalysisRun) -> str:
    if run.status == "script-failed":
        return f"the script exited with code {run.script_exit_code}"
    if run.status == "failed":
        return f"failed (vtune exited with code {run.exit_code})"
    return f"done in {run.elapsed_s:.1f} s, {len(run.result_dirs)} result folder(s)"


def _collect(config: VTuneConfig, analysis: str, command: List[str], folder: Path,
             stdout_to_stderr: bool) -> AnalysisRun:
    exit_dir = folder / EXIT_DIR / analysis
    env = launch.environment(os.environ, config.script, config.results / INSTRUMENTATION_FILE)
    env[EXIT_DIR_VARIABLE] = str(exit_dir.resolve())
    log = folder / f"vtune-{analysis}.log"
    started = time.perf_counter()
    try:
        code = _run_logged(command, env, log, stdout_to_stderr)
    except OSError as exc:
        log.write_text(f"cannot run {command[0]}: {exc.strerror or exc}\n")
        code = None
    outcome = AnalysisRun(analysis, "ok", command, exit_code=code, elapsed_s=time.perf_counter() - started)
    output = log.read_text(encoding="utf-8", errors="replace")
    outcome.errors = error_lines(output) or ([output.strip()] if code is None else [])
    outcome.warnings = warning_lines(output)
    outcome.script_exit_codes = _script_exit_codes(exit_dir)
    outcome.result_dirs = [p.name for p in result_dirs(config.result_dir(analysis))]
    if outcome.script_exit_code:
        outcome.status = "script-failed"
    elif code != 0 or not outcome.result_dirs:
        outcome.status = "failed"
        # (code None: VTune, or the launcher, could not even start; no hint fits that)
        outcome.hints = hints(outcome.errors, config.vtune, analysis) if code is not None else []
    return outcome


def _run_logged(command: List[str], env: Dict[str, str], log: Path, stdout_to_stderr: bool) -> int:
    """Run ``command``, showing its output live and copying it to ``log``; returns its exit code."""
    running = target.start(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process = running.process
    lock = threading.Lock()
    with open(log, "wb") as sink_log:
        def pump(stream, sink) -> None:
            out = getattr(sink, "buffer", None)
            for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
                with lock:
                    sink_log.write(chunk)
                if out is not None:
                    out.write(chunk)
                    out.flush()
                else:
                    sink.write(chunk.decode(errors="replace"))

        pumps = [threading.Thread(target=pump, args=(process.stdout, sys.stderr if stdout_to_stderr else sys.stdout)),
                 threading.Thread(target=pump, args=(process.stderr, sys.stderr))]
        for thread in pumps:
            thread.start()
        code = target.wait(running)  # through Ctrl-C too: VTune finalizes what it collected
        for thread in pumps:
            thread.join()
    return code


def _script_exit_codes(exit_dir: Path) -> List[int]:
    codes = []
    for path in sorted(exit_dir.glob("*")) if exit_dir.is_dir() else []:
        try:
            codes.append(int(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return codes


def result_dirs(base: Path) -> List[Path]:
    """``base`` and the per-rank or per-host folders beside it (``base.0``, ``base.host``), if they exist: VTune's
    under MPI, autoitt's under torchrun (:func:`.commands.per_rank`)."""
    found = [base] if base.is_dir() else []
    siblings = [p for p in base.parent.glob(f"{base.name}.*") if p.is_dir()] if base.parent.is_dir() else []
    return found + sorted(siblings, key=_natural)


def _natural(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def rank_of(name: str, analysis: str) -> Optional[str]:
    """The suffix VTune added to a result folder's name (a rank or a host), if any."""
    return name[len(analysis) + 1:] if name.startswith(f"{analysis}.") else None


def hints(errors: List[str], vtune: str, analysis: str) -> List[str]:
    """What the user can do about VTune's errors."""
    text = " ".join(errors)
    found = []
    if re.search(r"[Ss]ampling [Dd]river|perf_event_paranoid|PMU", text):
        found.append("hardware sampling is not available: set /proc/sys/kernel/perf_event_paranoid to 1 "
                     "(sudo sysctl -w kernel.perf_event_paranoid=1) or install VTune's sampling driver; in a virtual "
                     "machine without a virtual PMU, hardware analyses cannot run: use "
                     "--analysis hotspots --sampling-mode sw")
    if "ptrace" in text:
        found.append("user-mode sampling cannot attach: set /proc/sys/kernel/yama/ptrace_scope to 0 "
                     "(sudo sysctl -w kernel.yama.ptrace_scope=0), or give the container the SYS_PTRACE capability")
    if "cannot recognize the processor" in text:
        found.append("this VTune does not know this processor: update VTune"
                     + ("" if analysis == "hotspots" else ", or use --analysis hotspots --sampling-mode sw"))
    checker = Path(vtune).parent / "vtune-self-checker.sh"
    found.append(f"`{checker}` checks what this machine supports" if checker.is_file() else
                 "vtune-self-checker.sh (next to vtune, in VTune's bin64 folder) checks what this machine supports")
    return found


def _read_back(config: VTuneConfig, run: AnalysisRun, folder: Path) -> None:
    """``vtune -report`` each result folder into CSV files; a failing report is noted, never fatal."""
    (folder / CSV_DIR).mkdir(exist_ok=True)
    for name in run.result_dirs:
        for kind, report, extra in REPORTS[run.analysis]:
            output = folder / CSV_DIR / f"{name}-{kind}.csv"
            problem = run_report(report_command(config, folder.resolve() / name, report, extra, output), output)
            if problem:
                run.report_problems.append(f"{name} {kind} report: {problem}")


def save(folder: Path, vtune: str, runs: List[AnalysisRun]) -> None:
    data = {"vtune": vtune, "analyses": [asdict(r) for r in runs]}
    atomic_write(folder / RUN_FILE, (json.dumps(data, indent=2) + "\n").encode())


def load(folder: Path) -> Tuple[str, List[AnalysisRun]]:
    from transforms import SourceError

    path = folder / RUN_FILE
    try:
        data = json.loads(path.read_text())
        return data["vtune"], [AnalysisRun(**item) for item in data["analyses"]]
    except FileNotFoundError:
        return "", []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SourceError(str(path), f"unreadable: {exc}") from None


