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
    from ._rewrite import rewrite  # libcst is only imported when there is something to insert

    output = rewrite(data, plan)
    try:
        compile(output, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise RewriteError(f"the instrumented copy does not compile: {exc.msg} (line {exc.lineno})") from None
    return Result(source, detection, plan, Outcome.INSTRUMENTED, output)
