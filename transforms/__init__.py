"""The libcst side of autoitt: detect training regions, plan the markers, rewrite the source.

Data flows one way: :func:`parse_source` -> :func:`detect` -> :func:`make_plan`
-> ``_rewrite.rewrite``; :func:`instrument_source` runs them all for one
script. Only the rewrite imports libcst, so detection (``autoitt loops``)
and ``--help`` stay quick to start.
"""

from ._detect import INSTRUMENTED_MARKER, ROLES, Detection, Note, Region, detect
from ._instrument import Outcome, Result, instrument_source
from ._mode import MAX_PT_REGIONS, Mode
from ._errors import RewriteError, SourceError
from ._parsing import Source, parse_source
from ._plan import Edit, Plan, Wrap, make_plan


def strip_markers(data: bytes, name: str) -> bytes:
    """The original source of an autoitt copy (see :mod:`transforms._strip`); imports libcst."""
    from ._strip import strip_markers as strip

    return strip(data, name)


__all__ = [
    "INSTRUMENTED_MARKER",
    "MAX_PT_REGIONS",
    "ROLES",
    "Detection",
    "Edit",
    "Mode",
    "Note",
    "Outcome",
    "Plan",
    "Region",
    "Result",
    "RewriteError",
    "Source",
    "SourceError",
    "Wrap",
    "detect",
    "instrument_source",
    "make_plan",
    "parse_source",
    "strip_markers",
]
