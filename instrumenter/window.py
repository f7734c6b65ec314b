"""The collection window used by copies instrumented with ``--skip-steps``/``--steps``.

A copy made with a window binds ``itt`` to a :class:`CollectionWindow` around
``ittapi.compat``; every marker line stays the same. The window keeps, per
thread, the stack of tasks the script has opened, and only passes to ITT what
VTune can record:

* ``resume()`` from the script does nothing: collection resumes at the start of
  step ``skip_steps + 1`` (steps counted across epochs and loops), and every
  task then open (the epoch, the loop, the step itself) is begun right after
  the resume, so no task is begun while collection is paused;
* after step ``skip_steps + steps`` ends, every task still open is ended, then
  collection pauses; their own ends later are no-ops;
* ``pause()`` from the script pauses only if the window is still open.

This module is imported by instrumented copies: it must stay light (no click,
no rich, no libcst).
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any, Iterable, List, Optional


class _Task:
    __slots__ = ("domain", "name", "begun")

    def __init__(self, domain: Any, name: str) -> None:
        self.domain = domain
        self.name = name
        self.begun = False


class CollectionWindow:
    """``ittapi.compat`` with collection limited to steps ``skip_steps+1 .. skip_steps+steps``."""

    def __init__(self, itt: Any, skip_steps: int = 0, steps: Optional[int] = None,
                 step_tasks: Iterable[str] = ()) -> None:
        if skip_steps < 0 or (steps is not None and steps < 1):
            raise ValueError("skip_steps must be >= 0 and steps >= 1")
        self._itt = itt
        self.first_step = skip_steps + 1
        self.last_step = skip_steps + steps if steps is not None else None
        self._step_tasks = frozenset(step_tasks)
        self._lock = threading.Lock()
        self._local = threading.local()
        self.steps_seen = 0
        self.collecting = False
        self.closed = False
        atexit.register(self._warn_if_never_opened)

    # -- pass-through ------------------------------------------------------------

    def domain_create(self, name: Optional[str] = None) -> Any:
        return self._itt.domain_create(name)

    def pt_region_create(self, name: str) -> Any:
        return self._itt.pt_region_create(name)

    def pt_region_begin(self, region: Any) -> None:
        if self.collecting:
            self._itt.pt_region_begin(region)

    def pt_region_end(self, region: Any) -> None:
        if self.collecting:
            self._itt.pt_region_end(region)

    def detach(self) -> None:
        self._itt.detach()

    # -- collection control -----------------------------------------------------------

    def resume(self) -> None:
        """The script's region starts; the window, not the region, decides when to collect."""

    def pause(self) -> None:
        """The script's outermost region ended: close the window if it is still open."""
        with self._lock:
            if self.collecting:
                self._close()

    # -- tasks ---------------------------------------------------------------------

    def _stack(self) -> List[_Task]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def task_begin(self, domain: Any, name: str) -> None:
        stack = self._stack()
        task = _Task(domain, name)
        stack.append(task)
        with self._lock:
            if name in self._step_tasks:
                self.steps_seen += 1
                if self.steps_seen == self.first_step and not self.closed:
                    self._itt.resume()
                    self.collecting = True
                    for open_task in stack:
                        self._begin(open_task)
                    return
            if self.collecting:
                self._begin(task)

    def task_end(self, domain: Any) -> None:
        stack = self._stack()
        if not stack:
            return
        task = stack.pop()
        with self._lock:
            if task.begun:
                task.begun = False
                self._itt.task_end(task.domain)
            if (
                task.name in self._step_tasks
                and self.collecting
                and self.last_step is not None
                and self.steps_seen >= self.last_step
            ):
                self._close()

    def _begin(self, task: _Task) -> None:
        if not task.begun:
            self._itt.task_begin(task.domain, task.name)
            task.begun = True

    def _close(self) -> None:
        for task in reversed(self._stack()):
            if task.begun:
                task.begun = False
                self._itt.task_end(task.domain)
        self._itt.pause()
        self.collecting = False
        self.closed = True

    def _warn_if_never_opened(self) -> None:
        if self._step_tasks and self.steps_seen < self.first_step:
            print(
                f"autoitt: only {self.steps_seen} step(s) ran, so the collection window "
                f"(from step {self.first_step}) never opened: nothing was collected",
                file=sys.stderr,
            )
