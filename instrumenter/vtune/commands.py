"""The exact ``vtune`` command lines autoitt runs, built as argument lists (never a shell string).

Collection follows Intel's cookbook recipe "Profiling Machine Learning
Applications": hotspots with user-mode sampling and stacks, started paused so
only what the copy's ``itt.resume()``/``itt.pause()`` enclose is collected,
then microarchitecture exploration with memory bandwidth, on the same target::

    vtune -collect hotspots -start-paused -knob sampling-mode=sw -knob enable-stack-collection=true
          -search-dir <interpreter dir> -source-search-dir <copy dir> -source-search-dir <script dir>
          -data-limit 0 -result-dir <results>/hotspots -- <python> <launcher> COPY SCRIPT ARGS
    vtune -collect uarch-exploration -start-paused -knob collect-memory-bandwidth=true ... <results>/uarch ...

Reports are read back in CSV with an explicit delimiter (the ``format`` page
says csv "must be used with" ``-csv-delimiter``) into files, with ``-quiet``
so progress lines stay out of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from ..options import ANALYSES, VTuneOptions

#: The delimiter passed to every report, and the character it stands for.
CSV_DELIMITER = ("comma", ",")

#: The reports read back from each result: (name, report type, extra options).
#: The per-task report of a uarch-exploration result carries the top-down
#: columns (``Front-End Bound(%)``, ``Back-End Bound:Memory Bound(%)``, ...).
REPORTS: Dict[str, Tuple[Tuple[str, str, Tuple[str, ...]], ...]] = {
    "hotspots": (("summary", "summary", ()),
                 ("tasks", "hotspots", ("-group-by", "task")),
                 ("functions", "hotspots", ("-group-by", "function"))),
    "uarch": (("summary", "summary", ()),
              ("tasks", "hotspots", ("-group-by", "task"))),
}


@dataclass(frozen=True)
class VTuneConfig:
    """One profile's collection: the options plus every path the command lines name."""

    vtune: str
    #: The target, exactly as the built-in backend runs it: the launcher's command
    #: (:func:`instrumenter.launch.command`), ``(python, <launcher>, ..., COPY, SCRIPT, *ARGS)``.
    target: Tuple[str, ...]
    copy: Path
    script: Path
    results: Path
    start_paused: bool = True
    options: VTuneOptions = field(default_factory=VTuneOptions)
    #: A launcher VTune runs inside, e.g. ``("mpirun", "-n", "4")``: one vtune per rank.
    launcher: Tuple[str, ...] = ()

    @property
    def python(self) -> str:
        return self.target[0]

    def result_dir(self, analysis: str) -> Path:
        return _absolute(self.results) / analysis


def _absolute(path: Path) -> Path:
    """Absolute without resolving symlinks (paths as the user sees them); VTune may run elsewhere (mpirun)."""
    return Path(os.path.abspath(path))


def interpreter_dir(python: str) -> Path:
    """The folder of the interpreter binary that really runs: a venv's ``bin/python`` is a symlink,
    and VTune finds the symbols of the binary the process mapped, not of the link."""
    return Path(os.path.realpath(python)).parent


def search_args(config: VTuneConfig) -> List[str]:
    """Binaries: the interpreter's folder. Sources: the copy's folder (the code that ran), then the script's."""
    return ["-search-dir", str(interpreter_dir(config.python)),
            "-source-search-dir", str(_absolute(config.copy).parent),
            "-source-search-dir", str(_absolute(config.script).parent)]


def _knobs(analysis: str, sampling_mode: str) -> List[str]:
    if analysis == "hotspots":
        return ["-knob", f"sampling-mode={sampling_mode}", "-knob", "enable-stack-collection=true"]
    return ["-knob", "collect-memory-bandwidth=true"]


def collect_command(config: VTuneConfig, analysis: str) -> List[str]:
    """``[launcher...] vtune -collect ... -- <the target: python, the launcher, COPY SCRIPT ARGS>``."""
    options = config.options
    command = [*config.launcher, config.vtune, "-collect", ANALYSES[analysis]]
    if config.start_paused:
        command.append("-start-paused")
    command += _knobs(analysis, options.sampling_mode)
    command += search_args(config)
    command += ["-data-limit", str(options.data_limit_mb), "-result-dir", str(config.result_dir(analysis))]
    command += options.extra_args
    return command + ["--", *config.target]


def report_command(config: VTuneConfig, result: Path, report: str, extra: Sequence[str], output: Path) -> List[str]:
    """One CSV report of one result folder into ``output``; never under the launcher."""
    return [config.vtune, "-report", report, *extra, "-result-dir", str(result), "-format", "csv",
            "-csv-delimiter", CSV_DELIMITER[0], "-report-output", str(output), "-quiet", *search_args(config)]
