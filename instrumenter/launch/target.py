"""Running the process autoitt profiles (the script, or the profiler around it) and telling how it ended.

The rules a user's shell and scheduler rely on:

* the target never outlives autoitt: it is started with ``PR_SET_PDEATHSIG``,
  so if autoitt is killed (even by SIGKILL) the target gets SIGTERM;
* SIGTERM and SIGHUP sent to autoitt alone (a scheduler, ``kill``) are passed
  on to the target, and autoitt waits for it to end, then reads what was
  recorded. Ctrl-C reaches the whole process group, so the target gets it from
  the terminal: autoitt only waits, however often it is pressed;
* the run's exit status is the target's as a shell reports it: its exit code,
  or 128 + the signal that ended it (130 for Ctrl-C, 143 for SIGTERM, 139
  for a segmentation fault).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Iterator, List

#: Signals autoitt passes on to the target (Ctrl-C's SIGINT reaches it from the terminal).
FORWARDED = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def _death_signal_setter():
    """A preexec function that asks Linux to send the child SIGTERM when autoitt goes away; ``None``
    where that cannot be asked. ``prctl`` is looked up here, before the fork: the child between fork
    and exec should only call it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # the target may outlive autoitt, as any child can
    parent = os.getpid()

    def die_with_parent() -> None:  # pragma: no cover - runs in the forked child, before exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            # autoitt died between the fork and prctl: the signal was never going to come.
            os._exit(128 + signal.SIGTERM)

    return die_with_parent


def start(command: List[str], **popen) -> subprocess.Popen:
    """Start ``command`` tied to autoitt's life (see the module docstring); ``popen`` as for Popen."""
    return subprocess.Popen(command, preexec_fn=_death_signal_setter(), **popen)


@contextlib.contextmanager
def _signals_to(process: subprocess.Popen) -> Iterator[None]:
    """While the target runs: SIGTERM/SIGHUP to autoitt go to it, SIGINT leaves autoitt running."""

    def forward(signum, frame) -> None:
        if process.poll() is None:
            process.send_signal(signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals; the caller's own handling stays
        return
    handled = {signal.SIGINT: lambda signum, frame: None, **{s: forward for s in FORWARDED}}
    previous = {s: signal.signal(s, handler) for s, handler in handled.items()}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def wait(process: subprocess.Popen) -> int:
    """The target's return code (``-N`` for signal N), once it has ended; signals as the module says."""
    with _signals_to(process):
        return process.wait()


def shell_status(returncode: int) -> int:
    """The exit status a shell reports for a process that returned ``returncode``."""
    return 128 - returncode if returncode < 0 else returncode & 0xFF


def describe(returncode: int) -> str:
    """``exited with code 3``, ``was stopped by SIGTERM, exit status 143``."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was stopped by {name}, exit status {shell_status(returncode)}"
