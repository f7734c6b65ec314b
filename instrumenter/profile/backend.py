"""The interface of a profiling backend: run the copy, read what was collected, summarize, render.

``autoitt profile`` picks one :class:`Backend` object (the built-in ITT
collector, :mod:`instrumenter.builtin`, or VTune, :mod:`instrumenter.vtune`)
and calls it in that order; ``autoitt report`` finds the same one by the
:attr:`Backend.name` saved in ``run.json`` and reads again. Everything a
backend needs from the stages before it arrives as a :class:`Job` (to run)
and as a :class:`~instrumenter.profile.read_context.ReadContext` (to read). Each
backend owns its summary type (:attr:`Backend.summary_type`, a
:class:`~instrumenter.profile.summary.Summary`) and its options
(:attr:`~instrumenter.profile.options.ProfileOptions.builtin`, ``.vtune``): it reads
no other backend's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Type

from rich.console import Console

from .instrumentation import Instrumentation
from .options import ProfileOptions
from .summary import Summary

if TYPE_CHECKING:  # read_context imports the built-in backend's StepWindow, whose package imports this module
    from .read_context import ReadContext

#: How a backend tells the user what it is doing (one line each, on stderr).
Say = Callable[[str], None]


@dataclass(frozen=True)
class Job:
    """One run to collect: ``command`` runs ``copy`` as ``script`` (:func:`instrumenter.launch.command`, run in
    :func:`instrumenter.launch.environment`)."""

    script: Path
    copy: Path
    command: List[str]
    folder: Path
    instrumentation: Instrumentation
    options: ProfileOptions


@dataclass(frozen=True)
class Finished:
    """How the run ended: the script's exit code (``None`` when it never reported one), and how long it took."""

    exit_code: Optional[int]
    elapsed_s: float
    #: when the run started, seconds since the epoch (``time.time()``)
    started_at: Optional[float] = None
    #: the machine's other work during the run (:func:`instrumenter.profile.machine.during`), where it was read
    machine: Optional[Dict[str, float]] = None
    #: the sampling mechanism the run was given, and why (:meth:`instrumenter.collector.mechanism.Choice.to_json`);
    #: None where the run was not sampled by autoitt's collector
    sample_mechanism: Optional[Dict[str, Any]] = None


class Backend(ABC):
    """One way of collecting a profile."""

    #: Saved in ``run.json``; ``autoitt report`` finds the backend by it.
    name: ClassVar[str]
    #: What :meth:`read` returns, and what reads its ``summary.json`` back (``from_json``).
    summary_type: ClassVar[Type[Summary]]

    @abstractmethod
    def run(self, job: Job, say: Say) -> Finished:
        """Run the job's command, collecting into ``job.folder``."""

    @abstractmethod
    def read(self, folder: Path, context: ReadContext) -> Summary:
        """The summary of what was collected in ``folder`` (the run ``context`` describes); also writes it
        there (``summary.json``, ...)."""

    def saved(self, folder: Path) -> Optional[Summary]:
        """The summary a read of ``folder`` saved, if it is still that of what was collected (``autoitt report``
        prints it without reading everything again); ``None`` if it must be read again."""
        return None

    @abstractmethod
    def render(self, summary: Summary, console: Console, *, script: str, result_dir: Path,
               instrumentation: Instrumentation, verbose: bool = False) -> None:
        """Print ``summary`` for a person: one screen, or every table with ``verbose``."""

    def incomplete(self, summary: Summary) -> Optional[str]:
        """What the backend could not collect although the script ran (an input error: exit 2), if anything."""
        return None
