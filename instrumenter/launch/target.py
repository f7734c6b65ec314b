"""Running the process autoitt profiles (the script, or the profiler around it) and telling how it ended.

The rules a user's shell and scheduler rely on, so that ``autoitt profile train.py ARGS`` runs the script as
``python train.py ARGS`` would (../shared/research/guest-and-off-cpu.md, section 2: tini, dumb-init and
Python's subprocess defaults):

* the target inherits what a direct run would: the descriptors the caller passed (``close_fds=False``: bash's
  ``<(...)`` arguments, ``exec 3<file``, a jobserver's or socket activation's descriptors; those Python opens are
  never inheritable, PEP 446), autoitt's process group and terminal, and its signal mask;
* the target never outlives autoitt: it is started with ``PR_SET_PDEATHSIG``, so if autoitt is killed (even by
  SIGKILL) the target gets SIGTERM;
* every catchable signal sent to autoitt (a scheduler's SIGUSR1 or SIGTERM, ``kill -INT``, systemd, a k8s preStop
  hook: they signal the pid they started) is passed on to the target, and autoitt waits for it to end, then
  reads what was recorded. A signal a terminal sends to its whole foreground group (Ctrl-C's SIGINT, Ctrl-\'s
  SIGQUIT, SIGWINCH, a hangup's SIGHUP) reached the target too: it is passed on only where a process sent it
  (``kill``), never where the kernel did, so Ctrl-C is one KeyboardInterrupt, however often it is pressed.
  Not passed on: job control (Ctrl-Z stops the whole group, autoitt with it, and ``fg`` continues both), the
  signals of autoitt's own faults, SIGCHLD, and a signal autoitt ignores (nohup's SIGHUP: the target inherits
  it ignored, as under plain python);
* the run's exit status is the target's as a shell reports it: its exit code, or 128 + the signal that ended
  it (130 for Ctrl-C, 143 for SIGTERM, 139 for a segmentation fault).

How signals are taken: from :func:`start` to the end of :func:`wait`, the calling thread blocks the passed-on
signals, and so does every thread it starts meanwhile (a thread inherits its creator's mask): a thread of
autoitt's takes them with ``sigtimedwait``, whose ``si_code`` tells a kill from the terminal. The target gets
the caller's mask back before it runs. A thread started earlier that does not block them hands them to
Python's handlers instead, which pass them on without knowing the sender (SIGINT: not at all).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Optional

#: Never passed on: signals that cannot be caught, job control (a terminal's stops and continues reach the whole
#: group, autoitt with it), the target's own end (SIGCHLD), and the synchronous signals of autoitt's own faults.
_KEPT = frozenset({signal.SIGKILL, signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCONT,
                   signal.SIGCHLD, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT,
                   signal.SIGTRAP, signal.SIGSYS})
#: Signals a terminal (or its hangup) sends to the whole foreground group: the target got them as autoitt did.
FROM_TERMINAL = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGWINCH, signal.SIGHUP})
#: ``si_code`` of a signal the kernel sent (a terminal's, a hangup's), not a process (linux/siginfo.h)
_SI_KERNEL = 0x80
_PR_SET_PDEATHSIG = 1
#: How long the forwarding thread waits for a signal before it looks whether the target has ended.
_POLL_S = 0.1


def passed_on() -> FrozenSet[int]:
    """The signals autoitt passes on here: every catchable one but :data:`_KEPT` and those autoitt ignores."""
    chosen = set()
    for number in signal.valid_signals():
        if number in _KEPT:
            continue
        try:
            if signal.getsignal(number) == signal.SIG_IGN:
                continue
        except (ValueError, OSError):  # glibc's own real-time signals, which it hides
            continue
        chosen.add(number)
    return frozenset(chosen)


def _in_child(mask) -> Callable[[], None]:
    """The preexec function: the caller's signal mask back, then the death signal. ``prctl`` is looked up
    here, before the fork: the child between fork and exec should only call it."""
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None  # the target may outlive autoitt, as any child can
    parent = os.getpid()

    def prepare() -> None:  # pragma: no cover - runs in the forked child, before exec
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:
                # autoitt died between the fork and prctl: the signal was never going to come.
                os._exit(128 + signal.SIGTERM)

    return prepare


@dataclass
class Running:
    """A target started by :func:`start`: its process, and autoitt's signal state to put back at the end."""

    process: subprocess.Popen
    signals: FrozenSet[int]
    mask: object
    handlers: Dict[int, object] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    forwarder: Optional[threading.Thread] = None


def start(command: List[str], **popen) -> Running:
    """Start ``command`` as the module says; ``popen`` as for Popen. :func:`wait` for it, always."""
    signals = passed_on()
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for number in signals:  # for a thread that does not block them (see the module docstring)
            handlers[number] = signal.signal(number, _python_handler(number))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        process = subprocess.Popen(command, preexec_fn=_in_child(mask), close_fds=False, **popen)
    except BaseException:
        _restore(mask, handlers)
        raise
    running = Running(process, signals, mask, handlers)
    _PROCESS[0] = process
    running.forwarder = threading.Thread(target=_forward, args=(running,), name="autoitt-signals", daemon=True)
    running.forwarder.start()
    return running


#: The target the Python handlers pass signals on to (one target runs at a time in autoitt's process).
_PROCESS: List[Optional[subprocess.Popen]] = [None]


def _python_handler(number: int):
    def handler(_signum, _frame) -> None:
        process = _PROCESS[0]
        if number != signal.SIGINT and process is not None and process.poll() is None:
            process.send_signal(number)
    return handler


def _forward(running: Running) -> None:
    """The forwarding thread: each signal a process sent autoitt goes to the target."""
    while not running.done.is_set():
        try:
            info = signal.sigtimedwait(running.signals, _POLL_S)
        except InterruptedError:
            continue
        if info is None:
            continue
        if info.si_signo in FROM_TERMINAL and info.si_code == _SI_KERNEL:
            continue  # the terminal sent it to the target too
        if running.process.poll() is None:
            running.process.send_signal(info.si_signo)


def _restore(mask, handlers: Dict[int, object]) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for number, handler in handlers.items():
        signal.signal(number, handler)


def wait(running: Running) -> int:
    """The target's return code (``-N`` for signal N), once it has ended; signals as the module says."""
    try:
        return running.process.wait()
    finally:
        running.done.set()
        if running.forwarder is not None:
            running.forwarder.join()
        _PROCESS[0] = None
        _restore(running.mask, running.handlers)


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
