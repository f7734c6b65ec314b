"""``autoitt loops``: the training regions of a script and its local modules, as a table or JSON.

Detection only: nothing is rewritten, so libcst is never imported here. In
a notebook, regions are named by cell and line within it (the JSON gains
``cell``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import click

from transforms import detect

from ..profile.console import literal
from ..sources.project import discover


def show_loops(script: Path, as_json: bool, labels: Dict[int, str], roles: Dict[int, str]) -> None:
    """Print the regions found in ``script`` (``labels`` name the tasks of its lines, ``roles`` set their
    roles) and the notes."""
    local, notes = discover(script)
    found: List[Tuple[str, dict]] = []  # (path relative to the script's folder, region as JSON)
    all_notes: List[str] = []
    instrumented_by: Optional[str] = None
    for index, item in enumerate(local):
        detection = detect(item.source, labels if index == 0 else None, roles if index == 0 else None)
        if index == 0:
            instrumented_by = detection.already_instrumented
        found.extend((item.relative, item.kind.region_json(region)) for region in detection.regions)
        where = script if index == 0 else item.relative
        all_notes.extend(item.kind.note_line(where, n) for n in detection.notes)
    all_notes.extend(notes)
    if as_json:
        click.echo(json.dumps([{**region, "path": path} for path, region in found], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False, highlight=False, emoji=False)
    script_name = literal(script)
    if instrumented_by == "autoitt":
        console.print(f"{script_name} is already instrumented by autoitt.")
    elif instrumented_by:
        console.print(f"{script_name} is instrumented by {literal(instrumented_by)}: autoitt marks only the regions "
                      "that cannot cross its own markers.")
    if not found:
        console.print(f"{script_name}: no training loops found.")
    else:
        several = len({path for path, _ in found}) > 1 or len(local) > 1
        cells = any("cell" in region for _, region in found)
        table = Table(title=f"Training regions in {script_name}"
                      + (" and the local modules it imports" if several else ""), title_justify="left")
        for column in (("file",) if several else ()) + (("cell",) if cells else ()) + (
                "line", "role", "function", "label", "why"):
            table.add_column(column, overflow="fold")
        for path, region in found:
            start, end = region["line"], region["end_line"]
            row = (f"{start}-{end}" if end != start else str(start), region["role"], region["function"] or "(module)",
                   region["label"], region["reason"])
            if cells:
                cell = region.get("cell")
                row = (_cell_name(cell),) + row
            table.add_row(*(literal(cell) for cell in ((path,) + row if several else row)))
        console.print(table)
    for note in all_notes:
        console.print(f"[dim]{literal(note)}[/dim]")


def _cell_name(cell: Optional[dict]) -> str:
    if cell is None:
        return ""
    return str(cell["index"]) + (f" ({cell['id']})" if cell["id"] else "")
