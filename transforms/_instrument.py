"""One script in, its instrumented bytes out: parse -> detect -> plan -> rewrite -> verify."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Optional, Tuple

from ._detect import Detection, Note, Region, detect
from ._errors import RewriteError
from ._linemap import LineMap, count_lines
from ._mode import Mode
from ._parsing import Source, parse_source
from ._plan import Plan, make_plan


class Outcome(Enum):
    """What instrumenting one script came to."""

    INSTRUMENTED = "instrumented"
    NOTHING_TO_DO = "nothing to instrument"
    ALREADY_INSTRUMENTED = "already instrumented"


@dataclass(frozen=True)
class Result:
    """The outcome for one script, and everything later stages need to know of its copy.

    ``output`` is set only when markers were added. ``line_map`` maps the lines
    of what runs (the copy, or the script itself when nothing was added) to
    the script's own lines.
    """

    source: Source
    detection: Detection
    plan: Plan
    outcome: Outcome
    output: Optional[bytes]
    line_map: LineMap

    @property
    def domain(self) -> str:
        """The ITT domain of the copy's markers."""
        return self.plan.domain

    @property
    def regions(self) -> Tuple[Region, ...]:
        return self.detection.regions

    @property
    def step_labels(self) -> Tuple[str, ...]:
        """Task names of step iterations (of an already-instrumented script too: its own markers use them)."""
        return self.plan.step_labels


def instrument_source(data: bytes, name: str, mode: Mode = Mode(), stem: Optional[str] = None) -> Result:
    """Instrument a script given as bytes; writes nothing. See :func:`instrument`."""
    return instrument(parse_source(data, name), mode, stem=stem)


def instrument(source: Source, mode: Mode = Mode(), *, stem: Optional[str] = None,
               controls_collection: bool = True, entry: bool = True) -> Result:
    """Instrument a parsed script; writes nothing.

    ``stem`` names the default domain (``autoitt.<stem>``; default: from the
    source's name). ``controls_collection``: the outermost regions resume and
    pause collection (see :func:`~transforms._plan.make_plan`). ``entry``: the
    script is the one the user named, so ``mode.labels`` (lines of that
    script) apply to it.

    Raises :class:`~transforms.RewriteError` when the rewrite fails its own
    checks (an autoitt bug: the output would not compile, or the tree did not
    match the plan).
    """
    name = source.name
    detection = detect(source, mode.label_overrides if entry else None, mode.role_overrides if entry else None)
    script_stem = stem or name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    while True:
        plan = make_plan(detection, mode, name.rsplit("/", 1)[-1], script_stem, controls_collection)
        if plan.empty:
            outcome = Outcome.ALREADY_INSTRUMENTED if detection.already_instrumented else Outcome.NOTHING_TO_DO
            return Result(source, detection, plan, outcome, None, LineMap.identity(count_lines(source.text)))
        from ._rewrite import rewrite_module  # libcst is only imported when there is something to insert

        rewritten = rewrite_module(source.data, plan)
        too_deep = _compile(rewritten, name)
        if too_deep is None:
            break
        detection = _unmark_for_depth(detection, rewritten.line_map().original_line(too_deep), name)
    _check_safety(rewritten, source.data, name, plan)
    return Result(source, detection, plan, Outcome.INSTRUMENTED, rewritten.output, rewritten.line_map())


#: CPython's limit of statically nested blocks (loops, try, with) in one function.
_TOO_DEEP = "too many statically nested blocks"


def _compile(rewritten, name: str) -> Optional[int]:
    """Compile the copy; the line of the copy where it nests too deeply for Python, if it does.

    Any other compile error is autoitt's bug: :class:`RewriteError`.
    """
    try:
        compile(rewritten.output, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.msg == _TOO_DEEP and exc.lineno:
            return exc.lineno
        raise RewriteError(f"{name}: the instrumented copy does not compile: {exc.msg} "
                           f"(line {exc.lineno} of the copy)") from None
    return None


def _unmark_for_depth(detection: Detection, line: int, name: str) -> Detection:
    """``detection`` less one region around ``line``, so the copy nests less deeply.

    The markers of a region wrap it in ``try`` blocks (and ``with emit_itt``):
    where that exceeds Python's limit, an intermediate region (neither the
    outermost, which controls collection, nor a step loop) is left unmarked,
    the innermost first; when none is left, every region around ``line`` is.
    Regions elsewhere in the file keep their markers.
    """
    around = [r for r in detection.regions if r.line <= line <= r.end_line]
    spare = [r for r in around if not r.outermost and r.role != "step"]
    dropped = [max(spare, key=lambda r: r.line)] if spare else around
    if not dropped:
        # Only markers can push the copy past the limit (the original compiles), so this is autoitt's bug.
        raise RewriteError(f"{name}: the copy nests too deeply at line {line}, which no region covers")
    notes = [Note(r.line, f"{r.role} {'call' if r.kind == 'call' else 'loop'} left unmarked: with its markers the "
                          "code here would nest deeper than Python allows (its limit of statically nested blocks: 20 up "
                          "to 3.12, 21 from 3.13)") for r in dropped]
    return dataclasses.replace(detection, regions=tuple(r for r in detection.regions if r not in dropped),
                               notes=tuple(sorted((*detection.notes, *notes), key=lambda n: n.line or 0)))


def _check_safety(rewritten, original: bytes, name: str, plan: Plan) -> None:
    """Removing exactly the markers gives back the original byte for byte (the copy compiles: checked before).

    Like black's ``--safe``; there is no way to turn it off. A failure writes
    nothing and names the loop concerned (or, when libcst's own round trip of
    the file is not exact, the line it would change). The stripped tree's bytes
    are generated from the copy's code wherever the two trees share a
    statement (:func:`~transforms._codegen.generate_reusing`): the same bytes,
    without a second code generation of the whole file.
    """
    from ._codegen import generate_reusing
    from ._strip import strip_module

    stripped_tree = strip_module(rewritten.instrumented, rewritten.untouched)
    if generate_reusing(stripped_tree, rewritten.instrumented, rewritten.shared) == original:
        return
    stripped = stripped_tree.bytes  # a failure is worth a full code generation, for its message
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
