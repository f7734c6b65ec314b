"""The role of each loop: step, epoch, eval, or none; following same-file calls.

A loop is a *step* when one iteration updates parameters, directly or through
functions of the same file it calls (followed up to :data:`CALL_DEPTH` deep);
an *epoch* when its body holds a step loop (directly or through a call) or it
iterates over epochs and does work; an *eval* when it iterates over data and
runs forward passes with gradients off, after ``model.eval()``, in an
eval-like function, through an eval step or over validation data. A loop
whose backward passes an enclosing loop applies (``for batch: for task:
loss.backward()``, then ``optimizer.step()``) only accumulates gradients: the
enclosing loop is the step. A role given on the command line (``--role
LINE=step``) or a comment on the loop's header (``# autoitt: step``) decides
instead, in that order.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from . import _eval_evidence as eev
from . import _evidence as ev
from ._engines import EngineBinding
from ._index import Function, Index, Site
from ._names import dotted, last_name

#: How many same-file calls deep detection follows from a loop body.
CALL_DEPTH = 4

_DIRECTIVE = re.compile(r"#\s*autoitt:\s*(skip|step|epoch|eval)\b", re.I)

#: (role, reason), or None for a loop that is not a training region.
Role = Optional[Tuple[str, str]]


class Classifier:
    """Decides the role of each loop of an :class:`~transforms._index.Index`, memoized."""

    def __init__(self, index: Index, lines: Sequence[str], roles: Optional[Mapping[int, str]] = None) -> None:
        self.index = index
        self.lines = lines
        self.roles_given = dict(roles or {})
        self.roles: Dict[int, Role] = {}
        self._in_progress: Set[int] = set()
        #: (kind, id(function), depth) -> what calling the function does once, of that kind
        self._found_in: Dict[Tuple[str, int, int], Optional[str]] = {}
        self._recognisers = {
            "update": lambda call: ev.update_evidence(call, index.bindings),
            # an update that applies gradients (optimizer.step()), not one that only computes them
            "apply": lambda call: None if ev.computes_gradients(call) else ev.update_evidence(call, index.bindings),
            "forward": lambda call: eev.forward_pass(call, index.models),
        }
        #: id(loop) -> (line of the loop that applies its gradients, its backward pass): not a step
        self.accumulating: Dict[int, Tuple[int, str]] = {}
        #: id(loop) -> (line of a loop in it that only accumulates gradients, its backward pass)
        self._accumulated_by: Dict[int, Tuple[int, str]] = {}
        #: id(loop) -> why it generates or samples (not an evaluation): left unmarked, with a note
        self.generating: Dict[int, str] = {}
        #: id(loop) -> whether it is an environment-interaction step loop (RL), and why
        self._environment_steps: Dict[int, Optional[str]] = {}
        #: id(loop) -> whether it steps an environment and updates parameters (itself or in loops of its own)
        self._environment_updates: Dict[int, Optional[str]] = {}
        self._site_of = {id(site.node): site for site in index.loops}
        self._training: Dict[Tuple[int, int], Optional[Tuple[int, str]]] = {}
        self._loops_of: Dict[Optional[str], List[Site]] = {}
        for site in index.loops:
            key = site.function.qualname if site.function else None
            self._loops_of.setdefault(key, []).append(site)

    def forced(self, node: ast.AST) -> Optional[Tuple[str, str]]:
        """(role, reason) given for the statement: ``--role`` on its line, else a ``# autoitt:`` comment."""
        given = self.roles_given.get(node.lineno)
        if given:
            return given, "set by --role"
        comment = self.directive(node)
        return (comment, f"forced by '# autoitt: {comment}'") if comment else None

    def directive(self, node: ast.AST) -> Optional[str]:
        """``skip``/``step``/``epoch``/``eval`` from a ``# autoitt:`` comment on the header."""
        first = node.lineno
        body = getattr(node, "body", None)
        last = body[0].lineno - 1 if body and body[0].lineno > first else first
        if not body:
            last = getattr(node, "end_lineno", first) or first
        candidates = list(range(first, last + 1))
        if first >= 2 and self.lines[first - 2].lstrip().startswith("#"):
            candidates.insert(0, first - 1)
        for number in candidates:
            if number - 1 < len(self.lines):
                match = _DIRECTIVE.search(self.lines[number - 1])
                if match:
                    return match.group(1).lower()
        return None

    # -- functions -----------------------------------------------------------------------------

    def found_in(self, function: Function, kind: str, depth: int, seen: Set[int]) -> Optional[str]:
        """Why calling ``function`` does ``kind`` once (outside its own loops): ``update``
        parameters, ``apply`` gradients (an update that is not only a backward pass), or
        run a ``forward`` pass."""
        if depth <= 0 or id(function.node) in seen:
            return None
        key = (kind, id(function.node), depth)
        if key not in self._found_in:
            # Memoized per depth, so the call bound stays exact; a cycle cut
            # short by ``seen`` only ever hides evidence, never invents it.
            calls = self.index.function_calls(function, enter_loops=False)
            self._found_in[key] = self._evidence(calls, function, kind, depth, seen | {id(function.node)})
        return self._found_in[key]

    def _evidence(self, calls, function, kind: str, depth: int = CALL_DEPTH,
                  seen: Optional[Set[int]] = None) -> Optional[str]:
        """Why running ``calls`` (in ``function``) does ``kind``: a call's own evidence, else a callee's."""
        recognise = self._recognisers[kind]
        for call in calls:
            found = recognise(call)
            if found:
                return found
        for call in calls:
            for callee in self._callees(call, function):
                found = self.found_in(callee, kind, depth - 1, seen or set())
                if found:
                    called = self._called(call, callee)
                    if found.startswith("calls "):
                        return f"calls {called} -> {found[len('calls '):]}"
                    return f"calls {called}: {found}"
        return None

    def _callees(self, call: ast.Call, function: Optional[Function]) -> List[Function]:
        """The same-file functions ``call`` may run: the one it resolves to and, through ``self``, the
        subclasses' overrides of it (a base trainer's loop calling ``self.run_step()``)."""
        callee = self.index.resolve(call, function)
        if callee is None:
            return []
        if not (isinstance(call.func, ast.Attribute) and dotted(call.func.value) in ("self", "cls")):
            return [callee]
        return [callee, *self.index.overrides(callee)]

    def _called(self, call: ast.Call, callee: Function) -> str:
        """How a reason names the function a call runs: ``train_step()``, or through the name
        that wraps it, ``p_train_step() = jax.pmap(train_step)``."""
        alias = self.index.bindings.aliases.get(dotted(call.func) or "")
        if alias is not None and last_name(call.func) != callee.name:
            return f"{dotted(call.func)}() = {alias.shown}"
        return f"{callee.qualname}()"

    def training_loop_in(self, function: Function, depth: int, seen: Set[int]) -> Optional[Tuple[int, str]]:
        """(line, role) of a step or epoch loop that calling ``function`` runs."""
        if depth <= 0 or id(function.node) in seen:
            return None
        key = (id(function.node), depth)
        if key in self._training:
            return self._training[key]
        seen = seen | {id(function.node)}
        found = None
        for site in self._loops_of.get(function.qualname, []):
            role = self.role(site)
            if role and role[0] in ("step", "epoch"):
                found = site.node.lineno, role[0]
                break
        if found is None:
            for call in self.index.function_calls(function, enter_loops=True):
                found = next(filter(None, (self.training_loop_in(callee, depth - 1, seen)
                                           for callee in self._callees(call, function))), None)
                if found:
                    break
        self._training[key] = found
        return found

    def engine_role(self, engine: EngineBinding) -> Role:
        """(role, why) of a training engine's ``run()``: what its factory says, else what its process
        function does once per batch: updating parameters trains (a train-call), running the model
        only evaluates. ``None`` when neither can be told (the function is not this file's)."""
        if engine.role is not None:
            kind = "an engine" if engine.callbacks else "a trainer, whose run() holds its loop,"
            return engine.role, f"{kind} made by {engine.made_by} (line {engine.line})"
        function = self.index.function_named(engine.process) if engine.process is not None else None
        if function is None:
            return None
        update = self.found_in(function, "update", CALL_DEPTH, set())
        if update:
            return "train-call", (f"an engine made by {engine.made_by} (line {engine.line}), whose process "
                                  f"function updates parameters: {update}")
        forward = self.found_in(function, "forward", CALL_DEPTH, set())
        if forward:
            return "eval", (f"an engine made by {engine.made_by} (line {engine.line}), whose process function "
                            f"runs the model without updating it: {forward}")
        return None

    # -- loops ---------------------------------------------------------------------------------

    def within_environment_step(self, site: Site) -> Optional[int]:
        """The line of the environment-interaction step loop (RL) ``site`` is nested in, if any: its updates
        are part of that loop's step (``for _ in range(policy_frequency): ... optimizer.step()``)."""
        if self.forced(site.node) is not None:
            return None
        return next((outer.lineno for outer in site.loops
                     if id(outer) in self._site_of and self.environment_step(self._site_of[id(outer)])), None)

    def environment_step(self, site: Site) -> Optional[str]:
        """Why ``site`` is an RL step loop: each iteration steps an environment (``envs.step(action)``) and
        updates parameters (in its body, possibly only past ``learning_starts`` or every few steps, or in
        loops of its own), and no loop nested in it does both (that one is the step then)."""
        key = id(site.node)
        if key not in self._environment_steps:
            self._environment_steps[key] = None
            found = self._steps_environment_and_updates(site)
            if found and not any(self._steps_environment_and_updates(inner)
                                 for inner in self.index.nested.get(key, ())):
                self._environment_steps[key] = found
        return self._environment_steps[key]

    def _steps_environment_and_updates(self, site: Site) -> Optional[str]:
        """Memoized: each loop is asked once, whichever of the loops around it asks."""
        key = id(site.node)
        if key not in self._environment_updates:
            calls = self.index.block_calls(site.node.body, enter_loops=True)
            environment = ev.first(ev.environment_step(call) for call in calls)
            update = self._evidence(calls, site.function, "update") if environment else None
            self._environment_updates[key] = (f"steps an environment ({environment}) and updates parameters: "
                                              f"{update}" if update else None)
        return self._environment_updates[key]

    def role(self, site: Site) -> Role:
        key = id(site.node)
        if key in self.roles:
            return self.roles[key]
        if key in self._in_progress:
            return None
        self._in_progress.add(key)
        try:
            result = self._classify(site)
        finally:
            self._in_progress.discard(key)
        self.roles[key] = result
        return result

    def _classify(self, site: Site) -> Role:
        loop = site.node
        forced = self.forced(loop)
        if forced is not None and forced[0] in ("skip", "train-call"):
            return None  # a loop is never a train-call: _detect notes it
        if forced is not None:
            return forced
        if self.within_environment_step(site) is not None:
            return None  # part of the RL loop's step: _detect notes it
        environment = self.environment_step(site)
        if environment:
            return "step", environment
        body_end = loop.body[-1].end_lineno or loop.body[-1].lineno
        for inner in self.index.nested.get(id(loop), ()):
            if inner.node.lineno > body_end:
                continue  # in the loop's else clause: runs once, not every iteration
            role = self.role(inner)
            if role and role[0] in ("step", "epoch"):
                return "epoch", f"contains {role[0]} loop at line {inner.node.lineno}"
        calls = self.index.block_calls(loop.body, enter_loops=False)
        for call in calls:
            callee = self.index.resolve(call, site.function)
            if callee is not None:
                found = self.training_loop_in(callee, CALL_DEPTH, set())
                if found:
                    return "epoch", f"calls {self._called(call, callee)} which has a {found[1]} loop at line {found[0]}"
        update = self._evidence(calls, site.function, "update")
        if update:
            return self._step(site, calls, update)
        for call in calls:
            label = ev.train_call(call, self.index.imports)
            if label and self.index.resolve(call, site.function) is None:
                return "epoch", f"runs {dotted(call.func) or label}() each iteration"
        epochs = ev.names_epochs(loop)
        if epochs and any(ev.is_forward_call(call) for call in calls):
            # A loop over epochs that only prints or formats (a history table) is not training.
            return "epoch", epochs
        context = self._eval_context(site, calls)
        if context is None or eev.not_data(loop, calls):
            return None  # an eval loop iterates over data: not metrics, top-k values, an input() prompt
        forward = self._evidence(calls, site.function, "forward")
        if forward is None:
            return None  # nothing in it runs a model
        generating = eev.generation(loop, [c for c in calls if self._recognisers["forward"](c)], calls)
        if generating:
            self.generating[id(loop)] = generating
            return None
        return "eval", f"forward passes {context}" + ("" if forward in context else f": {forward}")

    def _step(self, site: Site, calls, update: str) -> Role:
        """A loop that updates parameters: a step, unless it only computes gradients that an
        enclosing loop applies, once per iteration of its own (meta-learning, accumulation over
        tasks or micro-batches): then that loop is the step and this one is left unmarked."""
        loop = site.node
        if self._evidence(calls, site.function, "apply") is None:
            around = self._applying_loop_around(site)
            if around is not None:
                self.accumulating[id(loop)] = around.lineno, update
                self._accumulated_by.setdefault(id(around), (loop.lineno, update))
                return None
        inner = self._accumulated_by.get(id(loop))
        if inner is not None:
            return "step", (f"updates parameters: {update} once per iteration, after the loop at line "
                            f"{inner[0]} accumulates gradients ({inner[1]})")
        return "step", f"updates parameters: {update}"

    def _applying_loop_around(self, site: Site) -> Optional[ast.AST]:
        """The innermost loop around ``site`` (in its function) whose own body, run once per
        iteration, applies gradients; ``None`` when a role given to it decides."""
        for outer in reversed(site.loops):
            if site.node.lineno > (outer.body[-1].end_lineno or outer.body[-1].lineno):
                continue  # in the loop's else clause: runs once, not every iteration
            if self.forced(outer) is not None:
                return None
            own = self.index.block_calls(outer.body, enter_loops=False)
            if self._evidence(own, site.function, "apply"):
                return outer
        return None

    def _eval_context(self, site: Site, calls) -> Optional[str]:
        """What says ``site`` evaluates (gradients off, eval mode, an eval function, an eval
        step, validation data), or ``None``; ``calls``: those its body makes itself."""
        if site.grad_off:
            return f"under {site.grad_off}"
        loop = site.node
        imports = self.index.imports
        for stmt in loop.body:
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                off = ev.first(ev.grad_disabled(item.context_expr, imports) for item in stmt.items)
                if off:
                    return f"under {off}"
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and ev.mode_switch(stmt.value) == "eval":
                return f"after {dotted(stmt.value.func)}()"
        for call in calls:
            for keyword in call.keywords:
                if keyword.arg == "training" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False:
                    return "with training=False"
        for function in site.function.chain() if site.function else ():
            if function.grad_off:
                return f"in @{function.grad_off.rstrip('()')} {function.qualname}()"
            if ev.eval_function_name(function.name):
                return f"in {function.qualname}()"
        key = site.function.qualname if site.function else None
        before = [(line, s) for line, s in self.index.mode_switches.get(key, []) if line < loop.lineno]
        if before and before[-1][1] == "eval":
            return f"after .eval() at line {before[-1][0]}"
        aliases = self.index.bindings.aliases
        for call in calls:
            step = eev.eval_step_call(call, aliases)
            if step:
                return f"in eval step {step}"
        data = eev.validation_data(loop)
        if data:
            return f"over validation data ({data})"
        return None
