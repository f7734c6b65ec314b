"""The result folder of one ``autoitt profile`` run, and what it holds.

``autoitt-results/<stem>-<n>/`` by default (n counts up; a folder that holds
anything is never reused). Inside: the instrumented copy, ``instrument.diff``,
``loops.json``, ``run.json`` (how the run went), ``itt/`` (the collector's
per-process files), ``trace.json``, ``summary.json`` and ``steps.svg``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

from transforms import SourceError

RUN_FILE = "run.json"
DEFAULT_ROOT = Path("autoitt-results")


@dataclass
class RunInfo:
    """What ``autoitt report`` needs to rebuild the summary later."""

    script: str
    copy: str
    args: List[str]
    backend: str
    command: List[str]
    domain: str
    step_labels: List[str]
    start_paused: bool
    elapsed_s: float = 0.0
    exit_code: Optional[int] = None
    notes: List[str] = field(default_factory=list)
    #: every ITT domain autoitt's markers used (entry script and instrumented modules)
    domains: List[str] = field(default_factory=list)

    def save(self, folder: Path) -> None:
        (folder / RUN_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path) -> "RunInfo":
        path = folder / RUN_FILE
        if not path.is_file():
            raise SourceError(str(folder), f"not an autoitt result folder (no {RUN_FILE})")
        try:
            return cls(**json.loads(path.read_text()))
        except (ValueError, TypeError) as exc:
            raise SourceError(str(path), f"unreadable: {exc}") from None


def new_result_dir(script: Path, chosen: Optional[Path]) -> Path:
    """A fresh, empty folder for this run (created); never one that holds results."""
    if chosen is not None:
        if chosen.exists() and (not chosen.is_dir() or any(chosen.iterdir())):
            raise SourceError(str(chosen), "result folder exists and is not empty; choose a new one")
        chosen.mkdir(parents=True, exist_ok=True)
        return chosen
    DEFAULT_ROOT.mkdir(exist_ok=True)
    n = 1
    while True:
        candidate = DEFAULT_ROOT / f"{script.stem}-{n}"
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
