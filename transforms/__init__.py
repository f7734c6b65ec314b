"""The libcst side of autoitt: detect training regions, plan the markers, rewrite the source.

Data flows one way: :func:`parse_source` -> :func:`detect` (over one statement
index) -> :func:`make_plan` -> rewrite -> :class:`Result` (the copy's bytes,
its regions, domain, step labels and exact :class:`LineMap`);
:func:`instrument` runs them all for one script and checks that
:func:`strip_markers` gives the original back. The code autoitt inserts is
defined once, in the marker vocabulary (``_markers``). Only the rewrite and
strip import libcst, so detection (``autoitt loops``) and ``--help`` stay
quick to start.
"""

from ._batches import BATCH_ROLE
from ._detect import ROLES, Detection, Note, Region, detect
from ._errors import RewriteError, SourceError
from ._instrument import Outcome, Result, instrument, instrument_source
from ._linemap import LineMap
from ._markers import INSTRUMENTED_MARKER, WINDOW_CLASS, WINDOW_MODULE
from ._mode import MAX_PT_REGIONS, Mode
from ._parsing import Source, parse_source
from ._plan import Edit, Plan, RegionTasks, Wrap, make_plan


def strip_markers(data: bytes, name: str) -> bytes:
    """The original source of an autoitt copy (see :mod:`transforms._strip`); imports libcst."""
    from ._strip import strip_markers as strip

    return strip(data, name)


__all__ = [
    "BATCH_ROLE",
    "INSTRUMENTED_MARKER",
    "MAX_PT_REGIONS",
    "ROLES",
    "WINDOW_CLASS",
    "WINDOW_MODULE",
    "Detection",
    "Edit",
    "LineMap",
    "Mode",
    "Note",
    "Outcome",
    "Plan",
    "Region",
    "RegionTasks",
    "Result",
    "RewriteError",
    "Source",
    "SourceError",
    "Wrap",
    "detect",
    "instrument",
    "instrument_source",
    "make_plan",
    "parse_source",
    "strip_markers",
]
