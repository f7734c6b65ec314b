"""From detected regions to the exact marker code, before any tree is touched.

A :class:`Plan` says, for each region's statement (by ordinal), which lines run
before it, which context manager it runs inside and which lines run after it
in a ``finally``; for loops, the same for every iteration's body. Keeping
this as data lets ``loops``, ``--diff`` and the tests see what will be
inserted, and keeps the rewriter free of policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Tuple

from ._detect import INSTRUMENTED_MARKER, Detection, Note, Region
from ._mode import MAX_PT_REGIONS, Mode

ITT_MODULE = "ittapi.compat"
DOMAIN_VAR = "_autoitt_domain"
WINDOW_MODULE = "instrumenter.window"
WINDOW_CLASS = "CollectionWindow"


@dataclass(frozen=True)
class Wrap:
    """``before`` runs first, then the statement (inside ``context`` when set),
    then ``after`` in a ``finally`` clause, so it runs on every way out."""

    before: Tuple[str, ...]
    after: Tuple[str, ...]
    context: Optional[str] = None


@dataclass(frozen=True)
class Edit:
    """The markers for one region: ``around`` its statement, ``each`` iteration."""

    ordinal: int
    kind: str
    line: int
    around: Wrap
    each: Optional[Wrap]


@dataclass(frozen=True)
class Plan:
    """Everything the rewriter inserts into one script."""

    source_name: str
    regions: Tuple[Region, ...]
    edits: Tuple[Edit, ...]
    #: (module, name-or-None, asname-or-None) for libcst's AddImportsVisitor
    imports: Tuple[Tuple[str, Optional[str], Optional[str]], ...]
    #: module-level statements placed right after the ittapi import
    header: Tuple[str, ...]
    header_comment: str
    notes: Tuple[Note, ...]
    #: compound statement ordinal -> ordinal past its subtree (from detection)
    spans: Mapping[int, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        return not self.edits


def _quote(text: str) -> str:
    """A double-quoted Python literal for any text (JSON's escapes are valid Python ones)."""
    return json.dumps(text)


def _free_name(candidates: Tuple[str, ...], detection: Detection) -> str:
    """The first candidate the script does not use, else the last one numbered until free."""
    for name in candidates:
        if name not in detection.names_in_use:
            return name
    number = 2
    while f"{candidates[-1]}_{number}" in detection.names_in_use:
        number += 1
    return f"{candidates[-1]}_{number}"


def make_plan(detection: Detection, mode: Mode, source_name: str, script_stem: str) -> Plan:
    """Decide every inserted line; pure."""
    notes: List[Note] = list(detection.notes)
    regions = detection.regions
    if not regions or detection.already_instrumented:
        return Plan(source_name, regions, (), (), (), "", tuple(notes))

    itt = _free_name(("itt", "_autoitt_itt"), detection)
    domain = _free_name((DOMAIN_VAR,), detection)

    torch_ref = None
    if detection.uses_torch and mode.torch_ops:
        if detection.torch_profiler is not None:
            notes.append(detection.torch_profiler)
        elif not detection.torch_names:
            notes.append(Note(None, "torch is not imported as a module at top level (e.g. 'import torch'): emit_itt() left out"))
        else:
            torch_ref = "torch" if "torch" in detection.torch_names else detection.torch_names[0]

    pt_vars = {}
    if mode.pt_regions:
        for region in regions:
            if region.role == "step" and region.label not in pt_vars:
                if len(pt_vars) == MAX_PT_REGIONS:
                    notes.append(Note(region.line, f"more than {MAX_PT_REGIONS} step loops: no anomaly-detection region for '{region.label}'"))
                    continue
                pt_vars[region.label] = _free_name((f"_autoitt_pt_{len(pt_vars)}",), detection)

    def call(function: str, *args: str) -> str:
        return f"{itt}.{function}({', '.join(args)})"

    edits = []
    for region in regions:
        begin = call("task_begin", domain, _quote(region.label))
        end = call("task_end", domain)
        if region.kind == "call":
            task_before, task_after = [begin], [end]
            each = None
        else:
            loop_label = f"{region.label}_loop"
            task_before = [call("task_begin", domain, _quote(loop_label))]
            task_after = [call("task_end", domain)]
            each_before, each_after = [begin], [end]
            if region.label in pt_vars and region.role == "step":
                each_before.append(call("pt_region_begin", pt_vars[region.label]))
                each_after.insert(0, call("pt_region_end", pt_vars[region.label]))
            each = Wrap(tuple(each_before), tuple(each_after))
        before: List[str] = []
        after: List[str] = []
        context = None
        controls = region.outermost and mode.collection_control
        if controls:
            before.append(call("resume"))
        before.extend(task_before)
        if controls and torch_ref:
            context = f"{torch_ref}.autograd.profiler.emit_itt()"
            if not mode.windowed:
                # The recipe's own range, on the PyTorch domain; in windowed mode it
                # would begin while collection is paused, so it is left out.
                name = "evaluation" if region.role == "eval" else "training"
                before.append(f"{torch_ref}.profiler.itt.range_push({_quote(name)})")
                after.append(f"{torch_ref}.profiler.itt.range_pop()")
        after.extend(task_after)
        if controls:
            after.append(call("pause"))
        edits.append(Edit(region.ordinal, region.kind, region.line, Wrap(tuple(before), tuple(after), context), each))

    imports: List[Tuple[str, Optional[str], Optional[str]]] = [(ITT_MODULE, None, itt)]
    header: List[str] = []
    if mode.windowed:
        imports.append((WINDOW_MODULE, WINDOW_CLASS, None))
        steps = tuple(sorted({r.label for r in regions if r.role == "step"}))
        header.append(
            f"{itt} = {WINDOW_CLASS}({itt}, skip_steps={mode.skip_steps}, steps={mode.steps}, "
            f"step_tasks=({', '.join(_quote(s) for s in steps)}{',' if len(steps) == 1 else ''}))"
        )
        if not steps:
            notes.append(Note(None, "no step loop found: the collection window (--skip-steps/--steps) never opens"))
    header.append(f"{domain} = {call('domain_create', _quote(mode.domain_for(script_stem)))}")
    for label, var in pt_vars.items():
        header.append(f"{var} = {call('pt_region_create', _quote(label))}")
    comment = f"{INSTRUMENTED_MARKER} copy of {source_name}; the markers are the lines using {itt} and _autoitt_*"
    return Plan(source_name, regions, tuple(edits), tuple(imports), tuple(header), comment, tuple(notes),
                detection.spans)
