"""Reading scripts and writing outputs without ever losing the user's work.

Every file autoitt writes goes through :func:`write_outputs`: it refuses what
is in the way (for every output, before writing any), keeps a backup when a
file is rewritten in place, and writes atomically (a temporary file in the
target's folder, then a rename) with the permission bits of the file the
output was made from. What a command does with its result at all is its
:class:`WriteBack`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Optional, Sequence

from transforms import INSTRUMENTED_MARKER, SourceError

#: How much of an existing file is read to tell whether autoitt wrote it.
_SNIFF_BYTES = 1 << 16


class OutputError(Exception):
    """An output autoitt cannot or must not write (a file in the way, a missing folder, a full disk).

    Apart from :class:`~transforms.SourceError` (the input is wrong); both are
    the user's to fix, and exit 2.
    """

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        self.message = message
        super().__init__(f"{path}: {message}")


class WriteBack(Enum):
    """What a command does with its result, in black's spirit."""

    WRITE = "write"        # write a new file (the copy)
    IN_PLACE = "in-place"  # replace the file itself, keeping a backup
    DIFF = "diff"          # print what would change, write nothing
    CHECK = "check"        # write nothing; the exit code says whether something would change
    STDOUT = "stdout"      # print the result

    @classmethod
    def from_flags(cls, *, check: bool = False, diff: bool = False, in_place: bool = False) -> "WriteBack":
        if diff:
            return cls.DIFF
        if check:
            return cls.CHECK
        return cls.IN_PLACE if in_place else cls.WRITE

    @property
    def writes(self) -> bool:
        return self in (WriteBack.WRITE, WriteBack.IN_PLACE)


@dataclass(frozen=True)
class Policy:
    """What may stand where an output goes, and what is said of what may not.

    ``replaceable``: existing files an output replaces without ``--force``;
    ``in_the_way``: the refusal for any other. ``is_source``: the refusal when
    the target is the file the output was made from (``None``: no such check,
    ``--force`` replaces it too). ``checks_folder``: the target must be a file
    name in an existing folder; ``makes_folders``: missing folders are made.
    """

    replaceable: Callable[[Path], bool]
    in_the_way: str
    is_source: Optional[str] = None
    checks_folder: bool = False
    makes_folders: bool = False


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


_NOT_AUTOITTS = "exists and was not written by autoitt; choose another -o or pass --force"
#: ``instrument``'s copy: a copy autoitt wrote earlier is replaced; anything else needs --force.
COPY = Policy(written_by_autoitt, _NOT_AUTOITTS, checks_folder=True,
              is_source="is the script itself; use --in-place to rewrite the script (a backup is kept)")
#: ``instrument -o DIR/`` and the result folder of ``profile``: every instrumented file, folders made as needed.
COPIES = Policy(written_by_autoitt, _NOT_AUTOITTS, is_source="is the original file; choose another -o folder",
                makes_folders=True)
#: ``strip -o``: nothing is replaced without --force.
ORIGINAL = Policy(lambda path: False, "exists; choose another -o or pass --force")


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


@dataclass(frozen=True)
class Output:
    """New bytes for ``target``, made from ``source`` (whose permission bits they get).

    ``in_place``: ``target`` is ``source`` itself, rewritten; a backup is kept
    as ``<target>.orig``. Otherwise ``source`` is never written.
    """

    target: Path
    data: bytes
    source: Path
    in_place: bool = False


def write_outputs(outputs: Sequence[Output], policy: Policy, *, force: bool = False) -> None:
    """Refuse, back up and write atomically, in that order; every refusal comes before any write.

    Raises :class:`OutputError`; on a failed write, the target keeps its old
    content and a fresh backup is removed again.
    """
    for output in outputs:
        _refuse(output, policy, force)
    for output in outputs:
        _write(output, policy)


def _refuse(output: Output, policy: Policy, force: bool) -> None:
    target = output.target
    if output.in_place:
        if backup_path(target).exists() and not force:
            raise OutputError(backup_path(target), "backup exists already; move it away or pass --force")
        return
    if policy.is_source is not None and same_file(target, output.source):
        raise OutputError(target, policy.is_source)
    if policy.checks_folder and not target.parent.is_dir():
        raise OutputError(target, f"cannot write: folder {target.parent} does not exist")
    if policy.checks_folder and target.is_dir():
        raise OutputError(target, "is a directory; give a file name for the copy")
    if target.exists() and not force and not policy.replaceable(target):
        raise OutputError(target, policy.in_the_way)


def _write(output: Output, policy: Policy) -> None:
    target = output.target
    backup = backup_path(target) if output.in_place else None
    try:
        if backup is not None:
            copy_backup(target, backup)
    except OSError as exc:
        raise OutputError(backup, f"cannot write the backup: {exc.strerror or exc}") from None
    try:
        if policy.makes_folders:
            target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, output.data, mode_from=output.source)
    except OSError as exc:
        if backup is not None:
            backup.unlink()  # the file is untouched, so its fresh backup goes too
        raise OutputError(target, f"cannot write: {exc.strerror or exc}") from None


def atomic_write(path: Path, data: bytes, mode_from: Optional[Path] = None) -> None:
    """Replace ``path`` with ``data`` in one rename; permission bits from ``mode_from``."""
    with atomic_writer(path, mode_from) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_writer(path: Path, mode_from: Optional[Path] = None) -> Iterator[BinaryIO]:
    """A file to write ``path``'s new content into, piece by piece; it replaces ``path`` in one rename
    when the block ends without an exception (and is removed otherwise)."""
    import tempfile  # only when writing: --diff and --check never pay for it

    directory = path.parent if str(path.parent) else Path(".")
    handle = tempfile.NamedTemporaryFile(dir=directory, prefix=f".{path.name}.", suffix=".autoitt-tmp", delete=False)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        # NamedTemporaryFile makes the file 0600: without a mode to copy, give it the one a plain
        # open() would (0666 less the umask), so a colleague can read a shared result folder.
        os.chmod(handle.name, stat.S_IMODE(mode_from.stat().st_mode) if mode_from is not None else 0o666 & ~_umask())
        os.replace(handle.name, path)
    except BaseException:
        try:
            os.unlink(handle.name)
        except OSError:
            pass
        raise


@functools.lru_cache(maxsize=None)
def _umask() -> int:
    # The only portable way to read the umask is to set it; set it straight back, once per process.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def copy_backup(script: Path, backup: Path) -> None:
    """Keep the original next to itself before an in-place rewrite."""
    import shutil

    tmp = backup.with_name(f".{backup.name}.autoitt-tmp")
    shutil.copy2(script, tmp)
    os.replace(tmp, backup)
