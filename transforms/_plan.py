"""From detected regions to the exact marker code, before any tree is touched.

A :class:`Plan` says, for each region's statement (by ordinal), which lines run
before it, which context manager it runs inside and which lines run after it
in a ``finally``; for loops, the same for every iteration's body. The code
comes from the marker vocabulary (:mod:`transforms._markers`); the plan only
decides where it goes. Keeping this as data lets ``loops``, ``--diff`` and the
tests see what will be inserted, keeps the rewriter free of policy, and hands
later stages (the profiler, the line map) what was decided: the domain, the
regions with their labels, the step labels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Sequence, Tuple

from ._detect import Detection, Note, Region
from ._markers import (DOMAIN_VAR, ITT_NAMES, LAUNCHED_RUNTIME_PACKAGE, LIBRARY_EVAL, LIBRARY_METHODS, LIBRARY_ROLES,
                       LIBRARY_STEP,
                       PT_REGION_VAR, RUNTIME_ALIASES, RUNTIME_CLASS, RUNTIME_PACKAGE, WINDOW_CLASS, Markers,
                       free_name)
from ._mode import MAX_PT_REGIONS, Mode


@dataclass(frozen=True)
class Wrap:
    """``before`` runs first, then the statement (inside one ``with`` of ``contexts``, when there are any),
    then ``after`` in a ``finally`` clause, so it runs on every way out."""

    before: Tuple[str, ...]
    after: Tuple[str, ...]
    contexts: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Edit:
    """The markers for one region: ``around`` its statement, ``each`` iteration.

    ``line`` is the region's line in the original (its ``for``/``while`` or its
    call): every line inserted for the region is shown as that line.
    """

    ordinal: int
    kind: str
    line: int
    around: Wrap
    each: Optional[Wrap]


@dataclass(frozen=True)
class RegionTasks:
    """The task names one region's markers record, decided here once for the rewrite and every reader:
    ``around`` the whole loop (``<label>_loop``) or the call (``<label>``), and ``each`` iteration of a loop
    (``<label>``; None for a call)."""

    role: str
    label: str
    around: str
    each: Optional[str]

    @classmethod
    def of(cls, region: Region) -> "RegionTasks":
        return cls.named(region.role, region.label, region.kind)

    @classmethod
    def named(cls, role: str, label: str, kind: str) -> "RegionTasks":
        """A region's of ``kind`` (``for``/``while``/``call``)."""
        if kind == "call":
            return cls(role, label, label, None)
        return cls(role, label, f"{label}_loop", label)

    def to_json(self) -> dict:
        return {"role": self.role, "label": self.label, "around": self.around, "each": self.each}


def operator_iterations(tasks: Sequence[RegionTasks]) -> Tuple[str, ...]:
    """The iteration tasks whose iterations ``--torch-ops sampled`` picks from (sorted): each step and eval
    loop's iteration, and for a library call the library's own step and eval iterations. The copy names them
    to its runtime; the plan hands them on (``Plan.operators_in``, then instrumentation.json) to the reader."""
    names = {t.each for t in tasks if t.role in ("step", "eval") and t.each is not None}
    if any(t.each is None and t.role in LIBRARY_ROLES for t in tasks):
        names.update((LIBRARY_STEP, LIBRARY_EVAL))
    return tuple(sorted(names))


@dataclass(frozen=True)
class Plan:
    """Everything the rewriter inserts into one script, and what later stages need to know of it.

    ``domain`` is the ITT domain the markers record on; ``step_labels`` the
    task names of step iterations (sorted); ``markers`` the names the copy binds.
    """

    source_name: str
    domain: str
    regions: Tuple[Region, ...]
    edits: Tuple[Edit, ...]
    markers: Markers
    #: (module, name-or-None, asname-or-None): the import statements the rewrite places
    imports: Tuple[Tuple[str, Optional[str], Optional[str]], ...]
    #: module-level statements placed right after the ittapi import
    header: Tuple[str, ...]
    header_comment: str
    notes: Tuple[Note, ...]
    #: compound statement ordinal -> ordinal past its subtree (from detection)
    spans: Mapping[int, int] = field(default_factory=dict, repr=False, compare=False)
    #: ``--torch-ops sampled``: the iteration tasks whose sampled iterations record PyTorch's operators
    #: (:func:`operator_iterations`); empty where the copy records every operator, or none
    operators_in: Tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.edits

    @property
    def tasks(self) -> Tuple[RegionTasks, ...]:
        """The task names each region's markers record, in region order."""
        return tuple(RegionTasks.of(region) for region in self.regions)

    @property
    def runtime(self) -> Tuple[str, ...]:
        """The modules of autoitt's own the copy imports (its ``itt`` runtime)."""
        return tuple(module for module, name, _ in self.imports if name is not None)

    @property
    def step_labels(self) -> Tuple[str, ...]:
        return step_labels(self.regions)


def step_labels(regions: Sequence[Region]) -> Tuple[str, ...]:
    """The task names of step iterations: step loops' labels, and the library's step for a training call
    the copy looks into (sorted)."""
    labels = {r.label for r in regions if r.role == "step"}
    if any(r.library is not None and r.role == "train-call" for r in regions):
        labels.add(LIBRARY_STEP)
    return tuple(sorted(labels))


def make_plan(detection: Detection, mode: Mode, source_name: str, script_stem: str,
              controls_collection: bool = True) -> Plan:
    """Decide every inserted line; pure.

    ``controls_collection``: whether this file's outermost regions resume and
    pause collection (and wrap PyTorch in ``emit_itt``). Off for a module
    imported by an entry script that controls collection itself: a nested
    pause would end collection while the entry's tasks are open, and
    ``emit_itt`` cannot nest.
    """
    notes: List[Note] = list(detection.notes)
    regions = detection.regions
    domain = mode.domain_for(script_stem)
    if not regions or detection.already_instrumented == "autoitt":
        return Plan(source_name, domain, regions, (), Markers(), (), (), "", tuple(notes))

    if detection.by_hand:
        # Instrumented by hand: the script's own resume/pause decide what is collected, so autoitt's
        # regions only add tasks (no resume/pause, no emit_itt, no collection window).
        controls_collection = False
        notes.append(Note(None, f"instrumented by {detection.already_instrumented}: autoitt adds tasks only where "
                                "they cannot cross the script's own markers, and leaves collection to them"))
        if mode.windowed:
            notes.append(Note(None, "--skip-steps/--steps not applied: the script controls collection with its "
                                    "own ITT markers"))
            mode = dataclasses.replace(mode, skip_steps=0, steps=None)
    torch_ref = None
    if detection.uses_torch and mode.torch_ops != "off":
        if detection.torch_profiler is not None:
            notes.append(detection.torch_profiler)
        elif not detection.torch_names:
            notes.append(Note(None, "torch is not imported as a module at top level (e.g. 'import torch'): emit_itt() left out"))
        else:
            torch_ref = "torch" if "torch" in detection.torch_names else detection.torch_names[0]
    runtime = RUNTIME_ALIASES[WINDOW_CLASS if mode.windowed else RUNTIME_CLASS]
    markers = Markers(itt=free_name(ITT_NAMES, detection.names_in_use),
                      domain=free_name((DOMAIN_VAR,), detection.names_in_use), torch=torch_ref,
                      runtime=free_name((runtime,), detection.names_in_use),
                      runtime_package=LAUNCHED_RUNTIME_PACKAGE if mode.launched else RUNTIME_PACKAGE)

    pt_vars = {}
    if mode.pt_regions:
        for region in regions:
            if region.role == "step" and region.label not in pt_vars:
                if len(pt_vars) == MAX_PT_REGIONS:
                    notes.append(Note(region.line, f"more than {MAX_PT_REGIONS} step loops: no anomaly-detection region for '{region.label}'"))
                    continue
                pt_vars[region.label] = free_name((PT_REGION_VAR.format(len(pt_vars)),), detection.names_in_use)

    edits = [_edit(region, markers, pt_vars.get(region.label), region.outermost and controls_collection, mode)
             for region in regions]

    header: List[str] = []
    operators_in: Tuple[str, ...] = ()
    if mode.windowed:
        steps = step_labels(regions)
        header.append(markers.window(mode.skip_steps, mode.steps, steps))
        if not steps:
            notes.append(Note(None, "no step loop found: the collection window (--skip-steps/--steps) never opens"))
    else:
        # sampled operators: the runtime enters emit_itt per picked iteration (never where the script's own
        # markers decide collection: as emit_itt, it is left out of a copy instrumented by hand)
        if mode.operators_sampled and markers.torch is not None and not detection.by_hand:
            operators_in = operator_iterations([RegionTasks.of(r) for r in regions])
        header.append(markers.collection(operators_in))
    header.append(markers.domain_create(domain))
    header.extend(markers.pt_region_create(var, label) for label, var in pt_vars.items())
    return Plan(source_name, domain, regions, tuple(edits), markers, markers.imports(mode.windowed), tuple(header),
                markers.header_comment(source_name), tuple(notes), detection.spans, operators_in)


def _edit(region: Region, markers: Markers, pt_var: Optional[str], controls: bool, mode: Mode) -> Edit:
    """The markers of one region; ``controls``: it resumes and pauses collection."""
    tasks = RegionTasks.of(region)
    task_before, task_after = [markers.task_begin(tasks.around)], [markers.task_end()]
    if tasks.each is None:
        each = None
    else:
        each_before, each_after = [markers.task_begin(tasks.each)], [markers.task_end()]
        if pt_var is not None and region.role == "step":
            each_before.append(markers.pt_region_begin(pt_var))
            each_after.insert(0, markers.pt_region_end(pt_var))
        each = Wrap(tuple(each_before), tuple(each_after))
    before: List[str] = [markers.resume()] if controls else []
    after: List[str] = []
    before.extend(task_before)
    contexts: List[str] = []
    if controls and markers.torch:
        if not mode.operators_sampled:  # sampled: the runtime enters emit_itt per picked iteration instead
            contexts.append(markers.emit_itt())
        if not mode.windowed:
            # The recipe's own range, on the PyTorch domain; in windowed mode it
            # would begin while collection is paused, so it is left out.
            before.append(markers.range_push("evaluation" if region.role == "eval" else "training"))
            after.append(markers.range_pop())
    after.extend(task_after)
    if controls:
        after.append(markers.pause())
    if region.library is not None:
        receiver, method = region.library
        said = method in LIBRARY_METHODS  # fit, evaluate...: the runtime knows; run: the plan tells it
        contexts.append(markers.library(receiver, method, None if said else LIBRARY_ROLES[region.role]))
    return Edit(region.ordinal, region.kind, region.line, Wrap(tuple(before), tuple(after), tuple(contexts)), each)
