"""Helpers shared by the command-line test suites: a folder snapshot, an in-process CLI."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, Tuple

from click.testing import CliRunner

from instrumenter.cli import cli

Snapshot = Dict[str, Tuple[str, object, object]]


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: relative path -> (kind, bytes or link target, mode bits)."""
    state: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                state[rel] = ("link", os.readlink(path), None)
            elif stat.S_ISDIR(info.st_mode):
                state[rel] = ("dir", None, mode)
            else:
                state[rel] = ("file", path.read_bytes(), mode)
    return state


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def default_signals() -> None:
    """``preexec_fn`` for a process a test sends signals to: the signals it relies on do what they do by
    default, whatever the test run inherited (``nohup`` ignores SIGHUP, a shell's ``&`` SIGINT and SIGQUIT;
    ignored stays ignored across exec)."""
    import signal

    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
