"""Reading scripts and writing copies without ever losing the user's work.

Writes are atomic (a temporary file in the target's folder, then a rename),
keep the permission bits of the script, and never replace a file autoitt did
not write unless the user said so.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Optional

from transforms import INSTRUMENTED_MARKER, SourceError

#: How much of an existing file is read to tell whether autoitt wrote it.
_SNIFF_BYTES = 1 << 16


def read_script(path: Path) -> bytes:
    """The bytes of ``path``, or a :class:`SourceError` that says what is wrong."""
    name = str(path)
    if not path.exists():
        raise SourceError(name, "no such file")
    if path.is_dir():
        raise SourceError(name, "is a directory; give the path of a Python script")
    try:
        return path.read_bytes()
    except PermissionError:
        raise SourceError(name, "cannot read: permission denied") from None
    except OSError as exc:
        raise SourceError(name, f"cannot read: {exc.strerror or exc}") from None


def default_output(script: Path) -> Path:
    """``train.py`` -> ``train_itt.py`` next to it (so relative paths in it still work)."""
    suffix = script.suffix or ".py"
    return script.with_name(f"{script.stem}_itt{suffix}")


def backup_path(script: Path) -> Path:
    return script.with_name(script.name + ".orig")


def written_by_autoitt(path: Path) -> bool:
    """True when ``path`` holds a copy autoitt wrote (its header marker is there)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return False
    return INSTRUMENTED_MARKER.encode("ascii") in head


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def atomic_write(path: Path, data: bytes, mode_from: Optional[Path] = None) -> None:
    """Replace ``path`` with ``data`` in one rename; permission bits from ``mode_from``."""
    directory = path.parent if str(path.parent) else Path(".")
    handle = tempfile.NamedTemporaryFile(dir=directory, prefix=f".{path.name}.", suffix=".autoitt-tmp", delete=False)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode_from is not None:
            os.chmod(handle.name, stat.S_IMODE(mode_from.stat().st_mode))
        os.replace(handle.name, path)
    except BaseException:
        try:
            os.unlink(handle.name)
        except OSError:
            pass
        raise


def copy_backup(script: Path, backup: Path) -> None:
    """Keep the original next to itself before an in-place rewrite."""
    tmp = backup.with_name(f".{backup.name}.autoitt-tmp")
    shutil.copy2(script, tmp)
    os.replace(tmp, backup)
