"""Records the ittapi calls an instrumented copy makes, in-process, and checks VTune's rules.

The real ``ittapi.compat`` functions still run (the copy talks to the real
ittapi, with no collector attached); the recorder wraps them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import ittapi.compat
import ittapi.native


@dataclass
class Recorder:
    """Calls as ``(kind, name)`` tuples, plus the rule violations seen."""

    calls: List[Tuple[str, Any]] = field(default_factory=list)
    violations: List[str] = field(default_factory=list)
    #: like ``vtune -start-paused``: nothing is collected until the first resume
    collecting: bool = False
    stacks: Dict[int, List[str]] = field(default_factory=dict)

    def install(self, monkeypatch) -> "Recorder":
        real = {name: getattr(ittapi.compat, name) for name in
                ("task_end", "resume", "pause", "pt_region_begin", "pt_region_end")}
        # A copy's runtime calls ittapi.native's task_begin and task_end (instrumenter.runtime.collection), the
        # collection window ittapi.compat's task_end: both are recorded.
        real["task_begin"], real["native_task_end"] = ittapi.native.task_begin, ittapi.native.task_end

        def task_begin(domain, handle):
            # A copy's runtime begins tasks with string handles it made once (instrumenter.runtime.collection).
            name = str(handle)
            self.calls.append(("begin", name))
            if not self.collecting:
                self.violations.append(f"task {name!r} begun while collection is paused")
            self._stack().append(name)
            real["task_begin"](domain, handle)

        def task_end(domain, real_end="task_end"):
            stack = self._stack()
            if not stack:
                self.violations.append("task_end without an open task")
                name = None
            else:
                name = stack.pop()
            if not self.collecting:
                self.violations.append(f"task {name!r} ended while collection is paused")
            self.calls.append(("end", name))
            real[real_end](domain)

        def native_task_end(domain):
            task_end(domain, "native_task_end")

        def resume():
            self.calls.append(("resume", None))
            if self.collecting:
                self.violations.append("resume while already collecting")
            self.collecting = True
            real["resume"]()

        def pause():
            self.calls.append(("pause", None))
            if any(self.stacks.values()):
                self.violations.append(f"pause with tasks open: {self.stacks}")
            self.collecting = False
            real["pause"]()

        def pt_begin(region):
            self.calls.append(("pt_begin", region))
            real["pt_region_begin"](region)

        def pt_end(region):
            self.calls.append(("pt_end", region))
            real["pt_region_end"](region)

        monkeypatch.setattr(ittapi.native, "task_begin", task_begin)
        monkeypatch.setattr(ittapi.compat, "task_end", task_end)
        monkeypatch.setattr(ittapi.native, "task_end", native_task_end)
        monkeypatch.setattr(ittapi.compat, "resume", resume)
        monkeypatch.setattr(ittapi.compat, "pause", pause)
        monkeypatch.setattr(ittapi.compat, "pt_region_begin", pt_begin)
        monkeypatch.setattr(ittapi.compat, "pt_region_end", pt_end)
        return self

    def _stack(self) -> List[str]:
        return self.stacks.setdefault(threading.get_ident(), [])

    @property
    def open_tasks(self) -> List[str]:
        return [name for stack in self.stacks.values() for name in stack]

    def names(self, kind: str) -> List[Any]:
        return [name for k, name in self.calls if k == kind]

    def assert_balanced(self) -> None:
        assert not self.violations, self.violations
        assert not self.open_tasks, f"tasks left open: {self.open_tasks}"
        assert not self.collecting, "collection left running (no pause after the region)"
        assert len(self.names("begin")) == len(self.names("end"))


class StandInItt:
    """Stands in for a copy's ``itt`` where a test calls the runtime itself (``instrumenter.runtime.libraries.attach``):
    records task begins (with their names) and ends, and nothing reaches ittapi."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any]] = []

    def task_begin(self, domain: Any, name: str) -> None:
        self.calls.append(("begin", name))

    def task_end(self, domain: Any) -> None:
        self.calls.append(("end", None))
