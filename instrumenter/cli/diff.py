"""Showing what a rewrite inserts.

Wrapping a loop in ``try``/``finally`` re-indents its body. A plain unified
diff would show every re-indented line as removed and added again and hide the
markers among them, so the default ``markers`` style compares lines with
indentation ignored: only inserted lines carry ``+``, and re-indented lines
appear as context, as they read in the copy. ``unified`` is a strict diff
that ``patch`` can apply.
"""

from __future__ import annotations

import difflib
from typing import List

import click


def _lines(text: str) -> List[str]:
    return [line + "\n" for line in text.splitlines()]


def unified_diff(original: str, instrumented: str, from_name: str, to_name: str, context: int = 3) -> str:
    return "".join(difflib.unified_diff(_lines(original), _lines(instrumented), from_name, to_name, n=context))


def marker_diff(original: str, instrumented: str, from_name: str, to_name: str, context: int = 3) -> str:
    """A unified-style diff that ignores indentation; re-indented lines are context, counted in a last line."""
    before, after = _lines(original), _lines(instrumented)
    matcher = difflib.SequenceMatcher(
        None, [line.strip() for line in before], [line.strip() for line in after], autojunk=False
    )
    out = [f"--- {from_name}\n", f"+++ {to_name}\n"]
    inserted = reindented = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            reindented += sum(1 for a, b in zip(before[i1:i2], after[j1:j2]) if a != b)
        if tag in ("replace", "insert"):
            inserted += j2 - j1
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@\n")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out.extend(" " + line for line in after[b1:b2])
                continue
            if tag in ("replace", "delete"):
                out.extend("-" + line for line in before[a1:a2])
            if tag in ("replace", "insert"):
                out.extend("+" + line for line in after[b1:b2])
    if len(out) == 2:
        return ""
    if reindented:
        out.append(
            f"# {inserted} line(s) inserted; {reindented} line(s) only re-indented, shown as context "
            "(--diff-style unified shows every changed line)\n"
        )
    return "".join(out)


#: The diff styles of ``--diff-style``, by name.
STYLES = {"markers": marker_diff, "unified": unified_diff}


def colorize(diff: str) -> str:
    """ANSI colours for a terminal: insertions green, removals red, hunks cyan."""
    styled = []
    for line in diff.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            styled.append(click.style(line, bold=True))
        elif line.startswith("@@"):
            styled.append(click.style(line, fg="cyan"))
        elif line.startswith("+"):
            styled.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            styled.append(click.style(line, fg="red"))
        elif line.startswith("# "):
            styled.append(click.style(line, dim=True))
        else:
            styled.append(line)
    return "".join(styled)
