"""The VTune backend: Intel VTune runs the copy, hotspots then uarch-exploration, as in Intel's cookbook recipe.

run: :mod:`.collect` (command lines from :mod:`.commands`, reports saved as CSV);
read: :mod:`.read` (CSV parsing in :mod:`.csv_reports`), mapped to the user's
own lines; render: :mod:`.render`. VTune cannot be installed on autoitt's CI
machines: the tests run this backend against a stand-in written from VTune's
documented command line.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Optional

from ..profile.backend import Backend, Finished, Job, Say
from ..profile.instrumentation import Instrumentation
from ..profile.read_context import ReadContext
from .summary import VTuneSummary


def find_vtune() -> Optional[Path]:
    """The ``vtune`` executable: on PATH, under $VTUNE_PROFILER_DIR, or under $ONEAPI_ROOT."""
    found = shutil.which("vtune")
    if found:
        return Path(found)
    candidates = []
    if os.environ.get("VTUNE_PROFILER_DIR"):
        candidates.append(Path(os.environ["VTUNE_PROFILER_DIR"]) / "bin64" / "vtune")
    if os.environ.get("ONEAPI_ROOT"):
        candidates.append(Path(os.environ["ONEAPI_ROOT"]) / "vtune" / "latest" / "bin64" / "vtune")
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


class VTuneBackend(Backend):
    name = "vtune"
    summary_type = VTuneSummary

    def __init__(self, vtune: Optional[Path] = None) -> None:
        self.vtune = vtune

    def run(self, job: Job, say: Say) -> Finished:
        from . import collect
        from .commands import VTuneConfig

        vtune = self.vtune or find_vtune()
        config = VTuneConfig(vtune=str(vtune), target=tuple(job.command), copy=job.copy, script=job.script,
                             results=job.folder, start_paused=job.instrumentation.start_paused,
                             options=job.options.vtune, launcher=job.options.launcher)
        started = time.perf_counter()
        runs = collect.run(config, job.folder, say, job.options.json_output)
        return Finished(collect.script_exit_code(runs), time.perf_counter() - started)

    def read(self, folder: Path, context: ReadContext) -> VTuneSummary:
        from .read import analyse

        return analyse(folder, context)

    def render(self, summary: VTuneSummary, console, *, script: str, result_dir: Path,
               instrumentation: Instrumentation, verbose: bool = False) -> None:
        # VTune's summary is one table per analysis already; its full reports are VTune's own (vtune-gui)
        from .render import render

        render(summary, console, script=script, result_dir=result_dir)

    def incomplete(self, summary: VTuneSummary) -> Optional[str]:
        failed = summary.failed
        return f"VTune could not complete: {', '.join(failed)} (see above)" if failed else None
