"""gloo's abort at exit (pytorch/pytorch#179291): the one failure the suite's DDP runs are run again for.

A gloo rank can abort after it trained, as Python finalizes: a gloo worker thread
(``ProcessGroupGloo::runLoop``) drops the last reference to a finished work, whose
saved thread-local state holds a Python object; the decref takes the GIL, Python
ends a thread that takes it while finalizing with ``pthread_exit``, and the forced
unwind through torch's destructor aborts the process ("terminate called without an
active exception"). Core dumps of it (2026-12-03) show exactly that stack.

Tearing the process group down first (``del model``, ``dist.barrier()``,
``dist.destroy_process_group()``, as the suite's scripts do) narrows it but does not
close it in torch 2.13: once a DDP model was built, the group's threads outlive
``destroy_process_group()`` (the model freed, ``gc.collect()`` run), so the barrier's
own work can still be dropped by them during finalization.

Measured on 2026-12-03, one run at a time on an idle machine (two at a time made it
rarer: 0 of 16 plain):

- ``test_phases.DDP`` (``mp.spawn``, 60 steps) without the teardown: 5 and 6 of 16
  plain-Python runs aborted, 0 of 16 under ``autoitt profile``;
- ``test_processes.DDP_TRAINER`` (torchrun) without it: 6 of 16 plain, 0 of 16 profiled;
- ``test_phases.DDP`` with it: 0 of 97 profiled, and 1 in a CI run of the whole suite.

So the collector does not make it likelier (a session's 0 of 16 plain against 6 of 16
profiled, 2026-12-02, was not seen again).
"""

from __future__ import annotations

import subprocess
from typing import Callable

#: What libstdc++ prints when the forced unwind reaches torch's destructor.
ABORT = "terminate called without an active exception"


def past_gloos_exit_abort(run: Callable[[], subprocess.CompletedProcess],
                          attempts: int = 3) -> subprocess.CompletedProcess:
    """``run()``'s result, run again while it ends in gloo's abort at exit, ``attempts`` runs in all (twice in a row
    was seen once, 2026-12-02). Any other end, a success or another failure, is returned at once."""
    for _attempt in range(attempts):
        done = run()
        if done.returncode == 0 or ABORT not in done.stderr:
            return done
    return done
