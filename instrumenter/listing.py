"""``autoitt loops``: the training regions of a script and its local modules, as a table or JSON.

Detection only: nothing is rewritten, so libcst is never imported here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import click

from transforms import Region, detect

from .project import discover, note_line


def show_loops(script: Path, as_json: bool, labels: Dict[int, str], roles: Dict[int, str]) -> None:
    """Print the regions found in ``script`` (``labels`` name the tasks of its lines, ``roles`` set their
    roles) and the notes."""
    local, notes = discover(script)
    found: List[Tuple[str, Region]] = []  # (path relative to the script's folder, region)
    all_notes: List[str] = []
    instrumented_by: Optional[str] = None
    for index, item in enumerate(local):
        detection = detect(item.source, labels if index == 0 else None, roles if index == 0 else None)
        if index == 0:
            instrumented_by = detection.already_instrumented
        found.extend((item.relative, region) for region in detection.regions)
        all_notes.extend(note_line(script if index == 0 else item.relative, n) for n in detection.notes)
    all_notes.extend(notes)
    if as_json:
        click.echo(json.dumps([{**region.to_json(), "path": path} for path, region in found], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False, highlight=False)
    if instrumented_by == "autoitt":
        console.print(f"{script} is already instrumented by autoitt.")
    elif instrumented_by:
        console.print(f"{script} is instrumented by {instrumented_by}: autoitt marks only the regions that cannot "
                      "cross its own markers.")
    if not found:
        console.print(f"{script}: no training loops found.")
    else:
        several = len({path for path, _ in found}) > 1 or len(local) > 1
        table = Table(title=f"Training regions in {script}" + (" and the local modules it imports" if several else ""),
                      title_justify="left")
        for column in (("file",) if several else ()) + ("line", "role", "function", "label", "why"):
            table.add_column(column, overflow="fold")
        for path, region in found:
            lines = f"{region.line}-{region.end_line}" if region.end_line != region.line else str(region.line)
            row = (lines, region.role, region.function or "(module)", region.label, region.reason)
            table.add_row(*((path,) + row if several else row))
        console.print(table)
    for note in all_notes:
        console.print(f"[dim]{note}[/dim]")
