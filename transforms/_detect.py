"""Finding a script's training regions: which loops and calls to mark, with what label.

The contract (also the JSON of ``autoitt loops --json``) is :class:`Region`.
Roles come from :mod:`transforms._roles` (step, epoch, eval); a *train-call*
is one call that trains inside a library (``model.fit``). This module selects
the regions that can take markers (not in compiled code, not on their block's
header line, not skipped), labels them uniquely per script, and tells which
are outermost (no other region runs whenever they run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from . import _evidence as ev
from ._batches import batch_fetches
from ._engines import RUN, engine_run
from ._index import Function, Index, Site
from ._labels import labels
from ._markers import LIBRARY_METHODS
from ._own_itt import calls_itt, crossing_own_markers, instrumented_by, own_domains, torch_profiler_call
from ._names import dotted
from ._parsing import Source
from ._roles import CALL_DEPTH, Classifier

ROLES = ("epoch", "step", "eval", "train-call")


@dataclass(frozen=True)
class Region:
    """One detected training region.

    ``line``/``end_line``: 1-based lines in the original file of the ``for``/
    ``while`` keyword (or of the call) and of the region's last line.
    ``function``: ``__qualname__`` of the innermost enclosing function without
    ``<locals>``, ``None`` at module level. ``label``: the ITT task name of one
    iteration (or of the call). ``reason``: why it was detected.

    The remaining fields are for planning: ``ordinal`` is the statement's
    position in a pre-order walk (see :mod:`transforms._index`), ``kind`` is
    ``for``/``while``/``call``, ``outermost`` says whether no other region is
    running whenever this one runs, ``library`` names the object and method
    of a library call whose epochs, steps and evals the copy can mark.
    """

    line: int
    end_line: int
    role: str
    function: Optional[str]
    label: str
    reason: str
    ordinal: int = field(compare=False)
    kind: str = field(compare=False)
    outermost: bool = field(compare=False, default=True)
    #: a library call autoitt can look inside (its callbacks): (the object's expression, the method)
    library: Optional[Tuple[str, str]] = field(compare=False, default=None)

    def to_json(self) -> dict:
        return {
            "line": self.line,
            "end_line": self.end_line,
            "role": self.role,
            "function": self.function,
            "label": self.label,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Note:
    """Something detection decided not to do, and why (shown to the user)."""

    line: Optional[int]
    message: str


@dataclass(frozen=True)
class Detection:
    """Everything the planner needs to know about a script."""

    regions: Tuple[Region, ...]
    notes: Tuple[Note, ...]
    uses_torch: bool
    torch_names: Tuple[str, ...]
    torch_profiler: Optional[Note]
    already_instrumented: Optional[str]
    names_in_use: frozenset
    #: the script calls ITT's resume itself (an autoitt copy does, and so does many a hand-made one)
    resumes_collection: bool = False
    #: the ITT domains the script's own calls create, where their names are written out
    own_domains: Tuple[str, ...] = ()
    #: the script imports TensorFlow or Keras (whose oneDNN tasks need TF_ENABLE_ONEDNN_OPTS on some CPUs)
    uses_tensorflow: bool = False
    #: compound statement ordinal -> ordinal past its subtree; lets the rewrite skip untouched code
    spans: Dict[int, int] = field(default_factory=dict, repr=False)

    @property
    def by_hand(self) -> bool:
        """The script makes ITT calls of its own (not an autoitt copy): they decide what is collected."""
        return self.already_instrumented is not None and self.already_instrumented != "autoitt"


#: (site, role, reason) of a region chosen for markers
_Found = Tuple[Site, str, str]


def detect(source: Source, label_overrides: Optional[Dict[int, str]] = None,
           role_overrides: Optional[Dict[int, str]] = None) -> Detection:
    """Find the training regions of ``source``; pure, writes nothing.

    ``label_overrides``: task labels keyed by the line of a loop or call.
    ``role_overrides``: roles (:data:`ROLES` or ``skip``) keyed the same way;
    they decide as a ``# autoitt:`` comment would.
    """
    index = Index(source)
    classifier = Classifier(index, source.lines, role_overrides)
    notes: List[Note] = []
    found = _loops(index, classifier, notes)
    library_calls = _train_calls(index, classifier, notes)
    engine_calls, one_task = _engine_calls(index, classifier, notes)
    library_calls += engine_calls
    library_calls += _eval_calls(index, classifier, found + library_calls + one_task, notes)
    found += library_calls + one_task
    found += _calls_given_a_role(index, classifier, found, notes)
    found += _compiled_call_sites(index, classifier)
    found += batch_fetches(index, found)
    by = instrumented_by(source, index)
    if by is not None and by != "autoitt":
        found = _clear_of_own_markers(index, found, notes)
    found.sort(key=lambda item: item[0].ordinal)
    regions = _regions(index, found, label_overrides or {}, {id(site) for site, _, _ in library_calls}, notes)
    return Detection(
        regions=tuple(regions),
        notes=tuple(sorted(notes, key=lambda n: n.line or 0)),
        uses_torch=index.imports.imports("torch"),
        torch_names=tuple(index.imports.names_bound_to("torch")),
        torch_profiler=_torch_profiler(index),
        already_instrumented=by,
        names_in_use=frozenset(index.names),
        resumes_collection=calls_itt(index, "resume"),
        own_domains=own_domains(index),
        uses_tensorflow=index.imports.imports("tensorflow") or index.imports.imports("keras"),
        spans=index.spans,
    )


def _loops(index: Index, classifier: Classifier, notes: List[Note]) -> List[_Found]:
    found: List[_Found] = []
    for site in index.loops:
        role = classifier.role(site)
        line = site.node.lineno
        forced = classifier.forced(site.node)
        if forced is not None and forced[0] == "skip":
            notes.append(Note(line, f"skipped: {_how(forced)}"))
        elif forced is not None and forced[0] == "train-call":
            notes.append(Note(line, "train-call is the role of a call, not of a loop: --role ignored"))
        elif role is None:
            around = classifier.within_environment_step(site)
            if around is not None:
                notes.append(Note(line, f"loop inside the environment-interaction step loop at line {around}: "
                                        "its updates are part of that loop's step, left unmarked"))
            elif id(site.node) in classifier.generating:
                notes.append(Note(line, f"not an evaluation: {classifier.generating[id(site.node)]}; left "
                                        f"unmarked (--role {line}=eval marks it)"))
            elif id(site.node) in classifier.accumulating:
                outer, backward = classifier.accumulating[id(site.node)]
                notes.append(Note(line, f"loop only accumulates gradients ({backward}) that the loop at line "
                                        f"{outer} applies once per iteration: that loop is the step, this one "
                                        "is left unmarked"))
        elif site.compiled:
            notes.append(Note(line, f"{role[0]} loop inside {site.compiled}: compiled code gets no markers; "
                                    "its call site does"))
        elif site.one_line:
            notes.append(Note(line, f"{role[0]} loop with its body on the header line: left alone "
                                    "(put the body on its own line to have it marked)"))
        else:
            found.append((site, role[0], role[1]))
    return found


def _train_calls(index: Index, classifier: Classifier, notes: List[Note]) -> List[_Found]:
    found: List[_Found] = []
    for site in index.call_sites:
        if index.resolve(site.call, site.function) is not None or site.compiled:
            continue  # a method of this file (e.g. Trainer.fit: its loops are found directly), or compiled
        called = dotted(site.call.func) or ast.unparse(site.call.func)
        forced = classifier.forced(site.node)
        if _left_alone(site, called, forced, notes):
            continue
        if forced is not None and forced[0] in ("eval", "train-call"):
            found.append((site, forced[0], forced[1]))
        else:
            rule = ev.train_call_rule(site.call, index.imports)
            found.append((site, "train-call", rule or f"{called}() trains inside a library"))
    return found


def _engine_calls(index: Index, classifier: Classifier, notes: List[Note]) -> Tuple[List[_Found], List[_Found]]:
    """``<engine>.run(...)`` of the training engines the script makes (:mod:`transforms._engines`): a
    train-call or an eval region, named for the engine (``trainer``, ``evaluator``), also where it runs
    inside another engine's event handler. One inside a loop is its loop's (an RL loop may run one).
    Those whose epochs and steps the runtime can mark (ignite's), and those that stay one task."""
    engines = index.bindings.engines
    found: List[_Found] = []
    one_task: List[_Found] = []
    for stmt, ordinal, function, loops, one_line in (index.simple if engines else ()):
        call, receiver = next(((c, engine) for c in index.calls_of.get(id(stmt), ())
                               for engine in [engine_run(c, engines)] if engine), (None, None))
        if call is None or loops:
            continue
        site = Site(stmt, ordinal, function, loops, None, call, receiver.rsplit(".", 1)[-1], one_line)
        forced = classifier.forced(stmt)
        if _left_alone(site, f"{receiver}.run", forced, notes):
            continue
        role = forced if forced is not None else classifier.engine_role(engines[receiver])
        if role is None:
            made_by = engines[receiver].made_by
            notes.append(Note(stmt.lineno, f"{receiver}.run(): an engine made by {made_by}, but whether it trains "
                                           "or evaluates cannot be told (its process function is not one of this "
                                           f"file's): give it a role, --role {stmt.lineno}=train-call or =eval"))
        elif role[0] in ("eval", "train-call"):
            callbacks = engines[receiver].callbacks
            if not callbacks:
                notes.append(Note(stmt.lineno, f"{receiver}.run() stays one task: autoitt knows no callbacks for it"))
            inside = "pytorch-ignite" if callbacks else "a library"
            (found if callbacks else one_task).append(
                (site, role[0], f"{receiver}.run() {'trains' if role[0] == 'train-call' else 'evaluates'} "
                                f"inside {inside}: {role[1]}" if forced is None else role[1]))
    return found, one_task


def _eval_calls(index: Index, classifier: Classifier, found: List[_Found], notes: List[Note]) -> List[_Found]:
    """Library calls that evaluate (:func:`~transforms._evidence.eval_call`), each one eval region.

    One inside a loop already marked is left to that loop's tasks.
    """
    trained = {dotted(site.call.func.value) for site in index.call_sites
               if isinstance(site.call.func, ast.Attribute)}
    taken = {id(site.node) for site, _, _ in found}
    added: List[_Found] = []
    for stmt, ordinal, function, loops, one_line in index.simple:
        if id(stmt) in taken:
            continue
        call, label = next(((c, label) for c in index.calls_of.get(id(stmt), ())
                            for label in [ev.eval_call(c, trained, index.imports)] if label), (None, None))
        if call is None or index.resolve(call, function) is not None:
            continue  # none, or a method of this file (its loops are found directly)
        if any(id(loop) in taken for loop in loops):
            continue
        site = Site(stmt, ordinal, function, loops, None, call, label, one_line)
        forced = classifier.forced(stmt)
        called = dotted(call.func)
        if _left_alone(site, called, forced, notes):
            continue
        if forced is not None and forced[0] in ("eval", "train-call"):
            added.append((site, forced[0], forced[1]))
        elif not isinstance(call.func, ast.Attribute):
            added.append((site, "eval", f"{called}() evaluates inside a library (its evaluation loop)"))
        else:
            why = "a trainer" if dotted(call.func.value) not in trained else "trained in this file"
            added.append((site, "eval", f"{called}() evaluates inside a library ({why})"))
    return added


def _left_alone(site: Site, called: str, forced: Optional[Tuple[str, str]], notes: List[Note]) -> bool:
    """Whether a call's statement stays unmarked: skipped by ``--role``/a comment or on its block's header
    line (each said in a note), or in compiled code (its call site is marked instead)."""
    line = site.node.lineno
    if forced is not None and forced[0] == "skip":
        notes.append(Note(line, f"skipped: {_how(forced)}"))
    elif site.one_line:
        notes.append(Note(line, f"{called}() on its block's header line: left alone "
                                "(put it on its own line to have it marked)"))
    else:
        return site.compiled is not None
    return True


def _how(forced: Tuple[str, str]) -> str:
    return "--role" if forced[1] == "set by --role" else f"'# autoitt: {forced[0]}'"


def _calls_given_a_role(index: Index, classifier: Classifier, found: List[_Found], notes: List[Note]) -> List[_Found]:
    """Calls autoitt did not take for training that ``--role LINE=train-call`` (or ``eval``) names; and a note
    for each ``--role`` line that names no loop or call."""
    taken = {site.line for site, _, _ in found} | {site.node.lineno for site in index.loops}
    taken |= {site.node.lineno for site in index.call_sites}
    added: List[_Found] = []
    for line, role in sorted(classifier.roles_given.items()):
        if line in taken:
            continue
        statement = next((entry for entry in index.simple
                          if entry[0].lineno == line and index.calls_of.get(id(entry[0]))), None)
        if statement is None or role not in ("train-call", "eval"):
            notes.append(Note(line, f"--role {line}={role}: no " + ("call" if statement is None else "loop")
                                    + f" starts on line {line}"))
            continue
        stmt, ordinal, function, loops, one_line = statement
        if one_line:
            notes.append(Note(line, f"--role {line}={role}: the call is on its block's header line: left alone "
                                    "(put it on its own line to have it marked)"))
            continue
        call = index.calls_of[id(stmt)][0]
        label = call.func.attr if isinstance(call.func, ast.Attribute) else dotted(call.func) or "call"
        added.append((Site(stmt, ordinal, function, loops, None, call, label), role, "set by --role"))
    return added


def _compiled_call_sites(index: Index, classifier: Classifier) -> List[_Found]:
    """Calls of compiled functions whose loops were left out: marked at the call site instead."""
    compiled: Dict[int, Function] = {}
    for site in index.loops:
        if site.compiled and site.function is not None and classifier.role(site):
            compiled.setdefault(id(site.function.node), site.function)
    if not compiled:
        return []
    found: List[_Found] = []
    for site in index.simple_sites():
        if site.compiled:
            continue
        for call in index.block_calls([site.node], enter_loops=True):
            callee = index.resolve(call, site.function)
            if callee is not None and id(callee.node) in compiled:
                site.call, site.call_label = call, callee.name
                found.append((site, "train-call", f"calls {callee.compiled} {callee.qualname}() whose loops are compiled"))
                break
    return found


def _clear_of_own_markers(index: Index, found: List[_Found], notes: List[Note]) -> List[_Found]:
    """``found`` less the regions that could cross a hand-instrumented script's own markers, each noted."""
    crossing = dict((id(site), why) for site, why in crossing_own_markers(index, [site for site, _, _ in found]))
    for site, role, _ in found:
        if id(site) in crossing:
            notes.append(Note(site.line, f"{role} {'call' if site.call is not None else 'loop'} left to the "
                                         f"script's own markers: it holds {crossing[id(site)]}"))
    return [item for item in found if id(item[0]) not in crossing]


def _torch_profiler(index: Index) -> Optional[Note]:
    found = torch_profiler_call(index)
    if found is None:
        return None
    line, resolved = found
    return Note(line, f"the script already runs {resolved}() (line {line}); not nesting emit_itt() inside it")


# -- regions and nesting ----------------------------------------------------------------------------

def _regions(index: Index, found: List[_Found], overrides: Dict[int, str], library_sites: Set[int],
             notes: List[Note]) -> List[Region]:
    """The regions, labelled, with which are outermost and which library calls the copy can look into."""
    region_nodes = {id(site.node) for site, _, _ in found}
    inside = _functions_run_inside(index, [site for site, _, _ in found])
    regions = []
    for (site, role, reason), label in zip(found, labels(found, overrides)):
        end_line = (site.call.end_lineno if site.call is not None else site.node.end_lineno) or site.line
        nested = any(id(loop) in region_nodes for loop in site.loops)
        in_called = site.function is not None and any(id(f.node) in inside for f in site.function.chain())
        kind = "call" if site.call is not None else ("while" if isinstance(site.node, ast.While) else "for")
        regions.append(Region(line=site.line, end_line=end_line, role=role,
                              function=site.function.qualname if site.function else None, label=label,
                              reason=reason, ordinal=site.ordinal, kind=kind,
                              outermost=not nested and not in_called,
                              library=_library_call(site.call, site.line, notes) if id(site) in library_sites else None))
    return regions


def _library_call(call: ast.Call, line: int, notes: List[Note]) -> Optional[Tuple[str, str]]:
    """(object, method) of ``obj.method(...)`` when the method is one library callbacks cover and the
    object is a name (``model``, ``self.trainer``): the copy evaluates it once more, so it must not be
    a call (``Trainer(...).fit(model)`` would make a second trainer). Otherwise a note says why the
    call stays one task."""
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if method not in LIBRARY_METHODS and method != RUN:
        notes.append(Note(line, f"{dotted(call.func) or 'the call'}() stays one task: autoitt knows no "
                                "callbacks for it"))
        return None
    receiver = dotted(call.func.value)
    if receiver is None:
        notes.append(Note(line, f".{method}() stays one task: its object is not a name (assign it to one, "
                                "e.g. trainer = Trainer(...), to have its epochs and steps marked)"))
        return None
    return receiver, method


def _functions_run_inside(index: Index, sites: List[Site]) -> Set[int]:
    """Functions that may run while a region of another function is running (so they must not resume/pause).

    A function that a region of its own reaches (recursion) stays outside: its
    regions nest in themselves, which the copy's counted collection control
    and guarded emit_itt allow.
    """
    engines = index.bindings.engines
    # an engine's event handlers run inside its run(), when that is a region
    inside = index.called_back_by({dotted(site.call.func.value) for site in sites
                                   if site.call is not None and engine_run(site.call, engines)})
    region_nodes = {id(site.node) for site in sites}
    for function in index.functions.values():
        if any(id(loop) in region_nodes for loop in function.defined_in_loops):
            inside.add(id(function.node))
    for site in sites:
        if site.call is not None or any(id(loop) in region_nodes for loop in site.loops):
            continue  # a call trains inside a library; a nested region's calls are its outer region's
        own = id(site.function.node) if site.function is not None else None
        reached: Set[int] = set()
        frontier: List[Tuple[Function, int]] = [
            (callee, CALL_DEPTH) for call in index.block_calls([site.node], enter_loops=True)
            for callee in [index.resolve(call, site.function)] if callee is not None]
        while frontier:
            function, depth = frontier.pop()
            if id(function.node) in reached or depth <= 0:
                continue
            reached.add(id(function.node))
            frontier.extend((callee, depth - 1) for call in index.function_calls(function, enter_loops=True)
                            for callee in [index.resolve(call, function)] if callee is not None)
        inside |= reached - {own}
    return inside
