"""The collection window used by copies instrumented with ``--skip-steps``/``--steps``.

A copy made with a window binds ``itt`` to a :class:`CollectionWindow` around
``ittapi.compat``; every marker line stays the same. The window keeps, per
thread, the stack of tasks the script has opened, and only passes to ITT what
VTune can record:

* ``resume()`` from the script does nothing: collection resumes at the start of
  step ``skip_steps + 1`` (steps counted across epochs and loops), and every
  task then open (the epoch, the loop, the step itself) is begun right after
  the resume, so no task is begun while collection is paused;
* after step ``skip_steps + steps`` ends, every task still open in that thread
  is ended, then collection pauses; their own ends later are no-ops. Tasks
  other threads have open are ended by those threads (ITT ends tasks on the
  calling thread), so the pause waits for the last of them;
* ``pause()`` from the script ends a training region; when the last region
  running in the process (any thread) ends, the window closes if it is open.

Task names get one ITT string handle each, as in :mod:`instrumenter.runtime.collection`.
This module is imported by instrumented copies: it must stay light (no click,
no rich, no libcst).
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .closures import install as install_closures
from .collection import task_begin


class _Task:
    __slots__ = ("domain", "name", "begun")

    def __init__(self, domain: Any, name: str) -> None:
        self.domain = domain
        self.name = name
        self.begun = False


class _WindowState:
    """What every copy in one process shares: the step count, whether collecting, the task stacks."""

    def __init__(self, itt: Any, first_step: int, last_step: Optional[int]) -> None:
        self.itt = itt
        self.first_step = first_step
        self.last_step = last_step
        self.step_tasks: set = set()
        self.lock = threading.Lock()
        self.local = threading.local()
        self.steps_seen = 0
        self.collecting = False
        self.closed = False
        #: training regions running now, in every thread
        self.regions = 0
        #: tasks passed to ITT and not yet ended, in every thread
        self.begun = 0
        #: the window closed while other threads still had begun tasks: pause when they end them
        self.pause_pending = False


#: One state per window, so an entry script and the modules it imports count steps together.
_STATES: Dict[Tuple[int, Optional[int]], _WindowState] = {}


class CollectionWindow:
    """``ittapi.compat`` with collection limited to steps ``skip_steps+1 .. skip_steps+steps``.

    Every instance with the same window in a process shares one state, so the
    markers of an entry script and of the modules it imports (each binds its
    own ``itt``) count steps and open tasks together.
    """

    def __init__(self, itt: Any, skip_steps: int = 0, steps: Optional[int] = None,
                 step_tasks: Iterable[str] = ()) -> None:
        if skip_steps < 0 or (steps is not None and steps < 1):
            raise ValueError("skip_steps must be >= 0 and steps >= 1")
        key = (skip_steps + 1, skip_steps + steps if steps is not None else None)
        state = _STATES.get(key)
        if state is None:
            state = _STATES[key] = _WindowState(itt, *key)
            atexit.register(_warn_if_never_opened, state)
        state.step_tasks.update(step_tasks)
        self._s = state

    @property
    def first_step(self) -> int:
        return self._s.first_step

    @property
    def last_step(self) -> Optional[int]:
        return self._s.last_step

    @property
    def steps_seen(self) -> int:
        return self._s.steps_seen

    @property
    def collecting(self) -> bool:
        return self._s.collecting

    # -- pass-through ------------------------------------------------------------

    def domain_create(self, name: Optional[str] = None) -> Any:
        return self._s.itt.domain_create(name)

    def pt_region_create(self, name: str) -> Any:
        return self._s.itt.pt_region_create(name)

    def pt_region_begin(self, region: Any) -> None:
        if self._s.collecting:
            self._s.itt.pt_region_begin(region)

    def pt_region_end(self, region: Any) -> None:
        if self._s.collecting:
            self._s.itt.pt_region_end(region)

    def detach(self) -> None:
        self._s.itt.detach()

    def library(self, receiver: Any, method: str, domain: Any, role: Optional[str] = None):
        """As :meth:`instrumenter.runtime.collection.Collection.library`; the library's steps count toward the window."""
        from .libraries import attach

        return attach(self, receiver, method, domain, role)

    # -- collection control -----------------------------------------------------------

    def resume(self) -> None:
        """A training region starts; the window, not the region, decides when to collect."""
        install_closures()
        with self._s.lock:
            self._s.regions += 1

    def pause(self) -> None:
        """A training region ended: close the window if it is open and no other region is running."""
        with self._s.lock:
            self._s.regions = max(self._s.regions - 1, 0)
            if self._s.collecting and self._s.regions == 0:
                self._close()

    # -- tasks ---------------------------------------------------------------------

    def _stack(self) -> List[_Task]:
        stack = getattr(self._s.local, "stack", None)
        if stack is None:
            stack = self._s.local.stack = []
        return stack

    def task_begin(self, domain: Any, name: str) -> None:
        state = self._s
        stack = self._stack()
        task = _Task(domain, name)
        stack.append(task)
        with state.lock:
            if name in state.step_tasks:
                state.steps_seen += 1
                if state.steps_seen == state.first_step and not state.closed:
                    state.itt.resume()
                    state.collecting = True
                    for open_task in stack:
                        self._begin(open_task)
                    return
            if state.collecting:
                self._begin(task)

    def task_end(self, domain: Any) -> None:
        state = self._s
        stack = self._stack()
        if not stack:
            return
        task = stack.pop()
        with state.lock:
            if task.begun:
                self._end(task)
                if state.pause_pending and state.begun == 0:
                    state.pause_pending = False
                    state.itt.pause()
            if (
                task.name in state.step_tasks
                and state.collecting
                and state.last_step is not None
                and state.steps_seen >= state.last_step
            ):
                self._close()

    def _begin(self, task: _Task) -> None:
        if not task.begun:
            task_begin(task.domain, task.name)
            task.begun = True
            self._s.begun += 1

    def _end(self, task: _Task) -> None:
        task.begun = False
        self._s.begun -= 1
        self._s.itt.task_end(task.domain)

    def _close(self) -> None:
        """End this thread's open tasks and stop beginning new ones; pause once no thread has a task
        open. ITT ends a task on the thread that calls it, so another thread's tasks can only be
        ended by that thread: collection runs on until it has (its next task end, at the latest
        when its own loop ends)."""
        for task in reversed(self._stack()):
            if task.begun:
                self._end(task)
        self._s.collecting = False
        self._s.closed = True
        if self._s.begun == 0:
            self._s.itt.pause()
        else:
            self._s.pause_pending = True


def _warn_if_never_opened(state: _WindowState) -> None:
    if state.step_tasks and state.steps_seen < state.first_step:
        print(
            f"autoitt: only {state.steps_seen} step(s) ran, so the collection window "
            f"(from step {state.first_step}) never opened: nothing was collected",
            file=sys.stderr,
        )
