"""The exact ``vtune`` command lines autoitt runs, built as argument lists (a shell only under torchrun, quoted).

Collection follows Intel's cookbook recipe "Profiling Machine Learning
Applications": hotspots with user-mode sampling and stacks, started paused so
only what the copy's ``itt.resume()``/``itt.pause()`` enclose is collected,
then microarchitecture exploration with memory bandwidth, on the same target::

    vtune -collect hotspots -start-paused -knob sampling-mode=sw -knob enable-stack-collection=true
          -search-dir <interpreter dir> -source-search-dir <copy dir> -source-search-dir <script dir>
          -data-limit 0 -result-dir <results>/hotspots -- <python> <results>/<stem>.autoitt.pyc ARGS
    vtune -collect uarch-exploration -start-paused -knob collect-memory-bandwidth=true ... <results>/uarch ...

Under ``--launcher`` every rank runs its own vtune: ``mpirun -n 4 vtune ...``,
or under torchrun ``torchrun --no-python ... sh -c 'exec vtune ...'`` (see
:func:`per_rank`).

Reports are read back in CSV with an explicit delimiter (the ``format`` page
says csv "must be used with" ``-csv-delimiter``) into files, with ``-quiet``
so progress lines stay out of them.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from ..launch.launchers import script_launcher_at, under_launcher
from ..profile.options import ANALYSES, VTuneOptions

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
    #: The target, exactly as the built-in backend runs it (:func:`instrumenter.launch.command`; collect.py runs
    #: it in :func:`instrumenter.launch.environment`): ``(python, <results>/<stem>.autoitt.pyc, *ARGS)``.
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
    """``[launcher...] vtune -collect ... -- <the target: python, <stem>.autoitt.pyc, ARGS>``.

    Under torchrun (or ``accelerate launch``, ``deepspeed``), its "no python" flag is added
    (:func:`~instrumenter.profile.options.under_launcher`)
    and each rank's vtune is started through :func:`per_rank`.
    """
    options = config.options
    command = [config.vtune, "-collect", ANALYSES[analysis]]
    if config.start_paused:
        command.append("-start-paused")
    command += _knobs(analysis, options.sampling_mode)
    command += search_args(config)
    command += ["-data-limit", str(options.data_limit_mb), "-result-dir", str(config.result_dir(analysis))]
    result_at = len(command) - 1
    command += options.extra_args
    command += ["--", *config.target]
    if script_launcher_at(config.launcher) is not None:
        command = per_rank(command, result_at)
    return list(under_launcher(config.launcher, command, python=False))


def per_rank(command: Sequence[str], result_at: int) -> List[str]:
    """``command`` through ``sh``, its result folder (``command[result_at]``) suffixed with each rank's ``$RANK``.

    Ranks must not share a result folder: VTune refuses one that already
    holds a result. VTune has no rank placeholder for ``-result-dir``; it
    names per-rank folders itself (``hotspots.0``, ...) only from MPI's
    ``PMI_RANK``/``PMI_ID`` (research notes on the VTune CLI, section 4),
    which Intel MPI's and MPICH's mpirun set, and srun with its PMI plugin
    (``--mpi=pmi2``). torchrun gives a worker its rank in ``RANK`` only, with
    one command line for all workers, so a shell expands ``$RANK`` in each:
    ``sh -c 'exec vtune ... -result-dir <results>/hotspots."$RANK" ... -- ...'``,
    every other word quoted as it is; ``exec`` leaves vtune itself as
    torchrun's worker, as without the shell. The folders are named as VTune
    names MPI ranks', so they are found and read back the same way
    (:func:`instrumenter.vtune.collect.result_dirs`). (Under ``srun --mpi=pmi2
    torchrun`` VTune may add ``.<PMI_RANK>`` too: still one folder per rank.)
    """
    words = [shlex.quote(word) for word in command]
    words[result_at] += '."$RANK"'
    return ["sh", "-c", "exec " + " ".join(words)]


def report_command(config: VTuneConfig, result: Path, report: str, extra: Sequence[str], output: Path) -> List[str]:
    """One CSV report of one result folder into ``output``; never under the launcher."""
    return [config.vtune, "-report", report, *extra, "-result-dir", str(result), "-format", "csv",
            "-csv-delimiter", CSV_DELIMITER[0], "-report-output", str(output), "-quiet", *search_args(config)]
