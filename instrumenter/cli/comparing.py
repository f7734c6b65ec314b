"""``autoitt compare``: each side's result folders read as ``autoitt report`` reads them, then compared
(:mod:`instrumenter.comparison`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import click

from transforms import SourceError

from ..comparison import Comparison, Run, Side, compare
from ..profile.results import RUN_FILE
from .tally import Tally


def read_side(folder: Path) -> Side:
    """A side: a result folder, or a folder of result folders (the side's repeats: each folder in it holding a
    run.json). Raises ``SourceError`` where it is neither, or where its runs profiled different scripts or
    ran on different backends."""
    if folder.is_dir() and not (folder / RUN_FILE).is_file():
        inner = sorted(child for child in folder.iterdir() if (child / RUN_FILE).is_file())
        if inner:
            runs = tuple(read_run(child) for child in inner)
            scripts = {Path(run.script).name for run in runs}
            backends = {run.backend for run in runs}
            if len(scripts) > 1 or len(backends) > 1:
                raise SourceError(str(folder), "its result folders are repeats of one side, so must profile one "
                                               f"script on one backend; they hold {', '.join(sorted(scripts))} on "
                                               f"{', '.join(sorted(backends))}")
            return Side(folder, runs)
    return Side(folder, (read_run(folder),))


def read_run(folder: Path) -> Run:
    """A result folder's script, backend and summary (the one saved, or read again from what was collected
    when it is missing or older than the traces). Raises ``SourceError`` where ``folder`` is no result folder."""
    from .profiling import load

    done = load(folder)
    return Run(folder=done.folder, script=done.record.script, backend=done.record.backend,
               summary=done.summarize(recompute=False), args=tuple(done.record.args or ()),
               machine=done.record.machine)


def compare_folders(base: Path, new: Path, threshold_percent: Optional[float] = None) -> Comparison:
    return compare(read_side(base), read_side(new), None if threshold_percent is None else threshold_percent / 100)


def show(comparison: Comparison, as_json: bool, fail_if_slower: Optional[float], tally: Tally,
         html: Optional[Path] = None) -> None:
    """Print the comparison (JSON, or for a person), and with ``html`` write it there as a page; with
    ``fail_if_slower`` (percent), a failed check (exit 1) where NEW is slower by more than that beyond noise,
    and a note where it is only within noise. Raises ``OutputError`` where the page cannot be written."""
    if html is not None:
        from ..comparison import render_html
        from ..sources.files import OutputError, atomic_write

        try:
            atomic_write(html, render_html(comparison).encode("utf-8"))
        except OSError as exc:
            raise OutputError(html, f"cannot write the comparison page ({exc.strerror})") from None
        tally.note(f"comparison page written: {html}")
    if as_json:
        click.echo(json.dumps(comparison.to_json(), indent=2))
    else:
        from ..comparison import render
        from ..profile.console import console_for_stdout

        render(comparison, console_for_stdout())
    main = comparison.main
    if fail_if_slower is None or main is None or main.median_s.ratio is None:
        return
    slower = main.median_s.ratio - 1
    if comparison.slower_by_more_than(fail_if_slower / 100):
        tally.failed_check(f"NEW is slower than BASE by more than {fail_if_slower:g} %, beyond noise")
    elif slower > fail_if_slower / 100:
        said = "inconclusive" if main.difference == "inconclusive" else "within noise"
        tally.note(f"NEW is {slower * 100:.1f} % slower, {said} ({main.verdict.how}): not failed")
