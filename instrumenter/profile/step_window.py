"""``--trace-steps`` parsed: the window of steps whose every task ``trace.json`` keeps (:mod:~instrumenter.builtin.statistics.timeline`).

Standard library only: the command line parses the option with it (once, as
it parses the others) before anything heavy is imported, and hands the
:class:`StepWindow` forward; ``run.json`` keeps the option's text
(:attr:`StepWindow.text`), parsed again only when a record is read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple

#: ``auto`` past :data:~instrumenter.builtin.statistics.timeline.AUTO_ALL_TASKS` tasks: these steps (1-based ranges) and the last ones.
AUTO_RANGES = ((2, 11),)
AUTO_LAST = 10


@dataclass(frozen=True)
class StepWindow:
    """A parsed ``--trace-steps``: ``everything``, or ranges of steps and a count of last steps."""

    everything: bool = False
    ranges: Tuple[Tuple[int, int], ...] = ()
    last: int = 0
    automatic: bool = False
    #: the option's text as given (what ``run.json`` records); not part of the window's identity
    text: str = field(default="auto", compare=False)

    @classmethod
    def parse(cls, text: str) -> "StepWindow":
        """``auto``, ``all`` or ``A-B,C,-N``; ``ValueError`` naming what is wrong."""
        given, text = text, text.strip()
        if text == "auto":
            return cls(ranges=AUTO_RANGES, last=AUTO_LAST, automatic=True, text=given)
        if text == "all":
            return cls(everything=True, text=given)
        ranges, last = [], 0
        for part in (p.strip() for p in text.split(",")):
            first, dash, second = part.partition("-")
            if not first and dash and second.isdigit() and int(second) > 0:
                last = max(last, int(second))
            elif first.isdigit() and int(first) > 0 and (not dash or second.isdigit() and int(second) >= int(first)):
                ranges.append((int(first), int(second) if dash else int(first)))
            else:
                raise ValueError(f"{part!r}: expected A-B (steps A to B), A (one step) or -N (the last N steps)")
        return cls(ranges=tuple(ranges), last=last, text=given)


#: The default window, ``--trace-steps auto``.
AUTO = StepWindow.parse("auto")
