"""Lines of an instrumented copy -> lines of the original script, exactly.

A rewrite only inserts whole lines (markers, ``try:``, ``with ...:``,
``finally:``, the header) and re-indents the lines of the regions it wraps:
every line of the original is in the copy, in order. So the map is the list
of the lines autoitt inserted; every other line of the copy is the next line
of the original. The rewrite records that list as it generates the copy (see
:func:`transforms._rewrite.rewrite_module`), so nothing is guessed from text.

Profilers and tracebacks see the copy (``train_itt.py:57``); the user knows the
original (``train.py:42``). An inserted line is shown as the line of the region
it marks (the ``for`` of its loop, the line of its call); a header line as the
original line it was inserted before.

Lines are numbered as Python numbers them: split at ``\\r\\n``, ``\\r`` and
``\\n`` only (not at form feeds or Unicode separators).
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

NEWLINE = re.compile(r"\r\n|\r|\n")


def count_lines(text: str) -> int:
    """How many lines Python counts in ``text`` (a final line break ends the last line)."""
    breaks = len(NEWLINE.findall(text))
    return breaks + (1 if text and not NEWLINE.match(text[-1]) else 0)


@dataclass(frozen=True)
class LineMap:
    """Which copy lines autoitt inserted, and so which original line every copy line is.

    ``inserted``: (copy line, original line it is shown as), one pair per
    inserted line, in copy order. JSON: ``{"copy_lines": N, "original_lines":
    M, "inserted": [[copy_line, shown_line], ...]}`` (the format of
    ``instrumentation.json``, read by the launcher).
    """

    copy_lines: int
    original_lines: int
    inserted: Tuple[Tuple[int, int], ...] = ()

    @classmethod
    def identity(cls, lines: int) -> "LineMap":
        """The map of a file run as it is (nothing inserted)."""
        return cls(lines, lines, ())

    @classmethod
    def from_inserted(cls, copy_lines: int, original_lines: int, inserted: Mapping[int, Optional[int]]) -> "LineMap":
        """``inserted``: copy line -> the original line to show it as, or ``None`` for the line it precedes.

        Raises ``ValueError`` when the counts do not add up: then the copy is not
        the original with lines inserted, and the map would be wrong.
        """
        if copy_lines - len(inserted) != original_lines or any(not 1 <= n <= copy_lines for n in inserted):
            raise ValueError(f"a copy of {copy_lines} lines with {len(inserted)} inserted cannot hold "
                             f"an original of {original_lines} lines")
        pairs = []
        for position, copy_line in enumerate(sorted(inserted)):
            shown = inserted[copy_line]
            if shown is None:  # the original line after it: copy lines before it, less those inserted
                shown = copy_line - position
            pairs.append((copy_line, max(1, min(shown, original_lines))))
        return cls(copy_lines, original_lines, tuple(pairs))

    def original_line(self, copy_line: int) -> Optional[int]:
        """The original line a copy line shows (``None`` outside the copy)."""
        if not 1 <= copy_line <= self.copy_lines:
            return None
        at, inserted = self._find(copy_line)
        return self.inserted[at][1] if inserted else copy_line - at

    def is_inserted(self, copy_line: int) -> bool:
        """True for a line autoitt wrote into the copy."""
        return self._find(copy_line)[1]

    def _find(self, copy_line: int) -> Tuple[int, bool]:
        """(how many inserted lines come before ``copy_line``, whether it is one itself)."""
        lines = self._inserted_lines
        at = bisect.bisect_left(lines, copy_line)
        return at, at < len(lines) and lines[at] == copy_line

    @functools.cached_property
    def _inserted_lines(self) -> List[int]:
        return [line for line, _ in self.inserted]

    def to_json(self) -> dict:
        return {"copy_lines": self.copy_lines, "original_lines": self.original_lines,
                "inserted": [list(pair) for pair in self.inserted]}

    @classmethod
    def from_json(cls, data: Mapping) -> "LineMap":
        return cls(int(data["copy_lines"]), int(data["original_lines"]),
                   tuple((int(a), int(b)) for a, b in data["inserted"]))
