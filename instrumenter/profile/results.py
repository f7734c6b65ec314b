"""The result folder of one ``autoitt profile`` run, and ``run.json``, the record of how the run went.

``autoitt-results/<stem>-<n>/`` by default (n counts up; a folder that holds
anything is never reused). Inside: the instrumented copy (and ``modules/``
for the copies of local modules), ``instrument.diff``, ``loops.json``,
``instrumentation.json`` (what the rewrite decided: see
:mod:`instrumenter.profile.instrumentation`), ``run.json`` (below), then what the
backend writes: ``itt/``, ``trace.json``, ``summary.json`` and ``steps.svg``
(built-in), or ``hotspots/``, ``uarch/``, ``csv/``, ``vtune.json`` (VTune).
"""

from __future__ import annotations

import dataclasses
import errno
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, List, Optional, TypeVar, Union

from transforms import SourceError

from ..sources.files import OutputError, atomic_write, atomic_writer

RUN_FILE = "run.json"
T = TypeVar("T")
DEFAULT_ROOT = Path("autoitt-results")


@dataclass(frozen=True)
class RunRecord:
    """How the run went: what ran, with which backend, and how it ended.

    ``autoitt profile`` writes it when the run starts (``exit_code`` null), so
    even a run that never finishes can be reported, and again when it ends.
    """

    script: str
    copy: str
    args: List[str]
    backend: str
    command: List[str]
    notes: List[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    exit_code: Optional[int] = None
    #: ``--trace-steps``: which steps trace.json keeps every task of (built-in backend)
    trace_steps: str = "auto"
    #: when the run started, seconds since the epoch (None: not recorded)
    started_at: Optional[float] = None
    #: the number of the first step collected (``--skip-steps N``: N + 1), counted across epochs
    first_step: int = 1
    #: the machine's other work during the run (:func:`instrumenter.profile.machine.during`); None: not read
    machine: Optional[Dict[str, float]] = None
    #: ``--torch-ops sampled``: which iterations recorded PyTorch's operators
    #: (:meth:`~instrumenter.runtime.torch_ops.OperatorSampling.to_json`); None: every one did, or none
    operator_sampling: Optional[Dict[str, Any]] = None
    #: the sampling mechanism the run was given and why (:meth:`instrumenter.collector.mechanism.Choice.to_json`);
    #: None: not chosen (no sampling, VTune)
    sample_mechanism: Optional[Dict[str, Any]] = None

    def ended(self, exit_code: Optional[int], elapsed_s: float, started_at: Optional[float] = None,
              machine: Optional[Dict[str, float]] = None,
              sample_mechanism: Optional[Dict[str, Any]] = None) -> "RunRecord":
        return dataclasses.replace(self, exit_code=exit_code, elapsed_s=elapsed_s, started_at=started_at,
                                   machine=machine, sample_mechanism=sample_mechanism)

    def save(self, folder: Path) -> None:
        atomic_write(folder / RUN_FILE, (json.dumps(asdict(self), indent=2) + "\n").encode())

    @classmethod
    def load(cls, folder: Path) -> "RunRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return read_record(folder, RUN_FILE, lambda data: cls(**{k: v for k, v in data.items() if k in known}))


#: Why a file could not be written that means the folder is not the user's to write (someone else's, a
#: read-only mount), not that writing failed (a full disk, a quota, an I/O error).
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


@dataclass(frozen=True)
class Unwritten:
    """An output file of a summary that could not be written (:func:`save_outputs`)."""

    name: str
    #: the system's reason (``No space left on device``)
    reason: str
    errno: Optional[int] = None

    @property
    def folder_not_writable(self) -> bool:
        """The folder is not the user's to write, rather than a write that failed."""
        return self.errno in NOT_WRITABLE


def save_outputs(folder: Path, outputs: Dict[str, Union[str, Callable[[IO[str]], None]]]) -> List[Unwritten]:
    """Write each output file of a summary (atomically: a file that fails leaves nothing, not even part of
    itself): its text, or a function writing it into a text file (a large one, written as it is made); what
    could not be written (:func:`unwritten_warnings` says it).

    A result folder the user cannot write (someone else's, read-only) is still
    summarized: only its files are not refreshed.
    """
    problems = []
    for name, content in outputs.items():
        try:
            with atomic_writer(folder / name) as handle:
                text = io.TextIOWrapper(handle, encoding="utf-8", errors="surrogateescape", write_through=False)
                if callable(content):
                    content(text)
                else:
                    text.write(content)
                text.flush()
                text.detach()
        except OSError as exc:
            problems.append(Unwritten(name, exc.strerror or str(exc), exc.errno))
    return problems


def unwritten_warnings(folder: Path, unwritten: List[Unwritten]) -> List[str]:
    """The summary's warning for each file :func:`save_outputs` could not write."""
    return [f"could not write {folder / item.name}: {item.reason}" for item in unwritten]


def read_record(folder: Path, name: str, build: Callable[[dict], T]) -> T:
    """``build`` applied to the JSON file ``name`` of a result folder; :class:`SourceError` if it is
    missing (not a result folder) or does not hold what ``build`` expects."""
    path = folder / name
    if not path.is_file():
        raise SourceError(str(folder), f"not an autoitt result folder (no {name})")
    try:
        text = path.read_text()
    except OSError as exc:  # someone else's folder, written with a umask that keeps others out
        raise SourceError(str(path), f"cannot be read: {exc.strerror}") from None
    try:
        return build(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceError(str(path), f"unreadable: {exc}") from None


def new_result_dir(script: Path, chosen: Optional[Path]) -> Path:
    """A fresh, empty folder for this run (created); never one that holds results.

    Raises :class:`OutputError` when it cannot be made or is in use.
    """
    try:
        if chosen is not None:
            if chosen.exists() and not chosen.is_dir():
                raise OutputError(chosen, "is a file, not a folder; choose a new folder for the results")
            if chosen.is_dir() and any(chosen.iterdir()):
                raise OutputError(chosen, "result folder exists and is not empty; choose a new one")
            chosen.mkdir(parents=True, exist_ok=True)
            return chosen
        if DEFAULT_ROOT.exists() and not DEFAULT_ROOT.is_dir():
            raise OutputError(DEFAULT_ROOT, "is a file, where autoitt keeps its results; move it away or "
                                            "choose a folder with -r")
        DEFAULT_ROOT.mkdir(exist_ok=True)
        n = 1
        while True:
            candidate = DEFAULT_ROOT / f"{script.stem}-{n}"
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                n += 1
    except OSError as exc:
        raise OutputError(chosen or DEFAULT_ROOT, f"cannot make the result folder: {exc.strerror or exc}") from None


def autoitt_fault(folder: Path) -> Optional[str]:
    """The summary's warning for a run whose script stopped on an error of autoitt's own (the launcher wrote
    ``launch.FAULT_FILE``: a line a process), so that it is never reported as the script's; None: none."""
    from ..launch import FAULT_FILE

    try:
        lines = (folder / FAULT_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return None
    if not lines:
        return None
    return (f"the run stopped on an error raised by autoitt's instrumentation, not by your script "
            f"({lines[0].partition(': ')[2]}{f'; {len(lines) - 1} more in {FAULT_FILE}' if len(lines) > 1 else ''}): "
            "a bug in autoitt (its instrument.diff shows what it inserted); `python SCRIPT` runs your script as written")

