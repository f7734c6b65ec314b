"""One script in, its instrumented bytes out: parse -> detect -> plan -> rewrite -> verify."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from ._detect import Detection, detect
from ._mode import Mode
from ._parsing import Source, parse_source
from ._plan import Plan, make_plan
from ._errors import RewriteError


class Outcome(Enum):
    """What instrumenting one script came to."""

    INSTRUMENTED = "instrumented"
    NOTHING_TO_DO = "nothing to instrument"
    ALREADY_INSTRUMENTED = "already instrumented"


@dataclass(frozen=True)
class Result:
    """The outcome for one script; ``output`` is set only when markers were added."""

    source: Source
    detection: Detection
    plan: Plan
    outcome: Outcome
    output: Optional[bytes]


def instrument_source(data: bytes, name: str, mode: Mode = Mode(), stem: Optional[str] = None) -> Result:
    """Instrument a script given as bytes; writes nothing.

    Raises :class:`~transforms.SourceError` for input autoitt cannot read and
    :class:`~transforms.RewriteError` when the rewrite fails its own checks
    (an autoitt bug: the output would not compile, or the tree did not match
    the plan).
    """
    source = parse_source(data, name)
    detection = detect(source, mode.label_overrides)
    script_stem = stem or name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    plan = make_plan(detection, mode, name.rsplit("/", 1)[-1], script_stem)
    if detection.already_instrumented:
        return Result(source, detection, plan, Outcome.ALREADY_INSTRUMENTED, None)
    if plan.empty:
        return Result(source, detection, plan, Outcome.NOTHING_TO_DO, None)
    from ._rewrite import rewrite_module  # libcst is only imported when there is something to insert

    rewritten = rewrite_module(data, plan)
    output = rewritten.instrumented.bytes
    _check_safety(rewritten, data, output, name, plan)
    return Result(source, detection, plan, Outcome.INSTRUMENTED, output)


def _check_safety(rewritten, original: bytes, output: bytes, name: str, plan: Plan) -> None:
    """The copy compiles, and removing exactly the markers gives back the original byte for byte.

    Like black's ``--safe``; there is no way to turn it off. A failure writes
    nothing and names the loop concerned (or, when libcst's own round trip of
    the file is not exact, the line it would change).
    """
    from ._strip import strip_module

    try:
        compile(output, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise RewriteError(f"{name}: the instrumented copy does not compile: {exc.msg} "
                           f"(line {exc.lineno} of the copy)") from None
    stripped = strip_module(rewritten.instrumented, rewritten.untouched).bytes
    if stripped == original:
        return
    round_trip = rewritten.original.bytes
    if round_trip != original:
        line = _first_difference(original, round_trip)
        raise RewriteError(f"{name}: libcst cannot reproduce this file exactly (it would change line {line}, "
                           "e.g. whitespace-only or comment lines at the very end, or CR-only newlines); "
                           "nothing was written rather than alter your file")
    line = _first_difference(original, stripped)
    region = next((r for r in plan.regions if r.line <= line <= r.end_line), None) or next(
        (r for r in plan.regions if r.line >= line), None)
    where = f"the {region.role} {'call' if region.kind == 'call' else 'loop'} at line {region.line}" \
        if region else f"line {line}"
    raise RewriteError(f"{name}: safety check failed: removing the markers does not give back the "
                       f"original around {where}; nothing was written")


def _first_difference(a: bytes, b: bytes) -> int:
    """The 1-based line where two texts first differ."""
    before, after = a.splitlines(), b.splitlines()
    return next((i for i, (x, y) in enumerate(zip(before, after), start=1) if x != y),
                min(len(before), len(after)) + 1)
