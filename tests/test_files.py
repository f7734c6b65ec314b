"""The file-safety contract: autoitt never loses the user's work.

Copies go next to the script, keep its encoding, newlines, indentation and
permission bits, are written atomically, and never replace a file autoitt did
not write unless the user says --force.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from instrumenter.sources import files
from instrumenter.cli import cli
from tests.cli_helpers import invoke, snapshot
from tests.scripts import TORCH_TRAIN
from transforms import INSTRUMENTED_MARKER


def names(folder: Path) -> set:
    return {entry.name for entry in folder.iterdir()}


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def train(work: Path) -> Path:
    path = work / "train.py"
    path.write_text(TORCH_TRAIN)
    return path


def test_default_output_is_stem_itt_next_to_script_and_original_is_untouched(work: Path) -> None:
    sub = work / "project"
    sub.mkdir()
    script = sub / "train.py"
    script.write_text(TORCH_TRAIN)
    original = script.read_bytes()
    before = snapshot(work)
    # Run from another folder: the copy goes next to the script, not into the cwd.
    result = invoke("instrument", "project/train.py")
    assert result.exit_code == 0, result.output
    copy = sub / "train_itt.py"
    assert "project/train_itt.py" in result.stderr
    assert script.read_bytes() == original
    after = snapshot(work)
    assert set(after) == set(before) | {"project/train_itt.py"}
    assert {k: v for k, v in after.items() if k != "project/train_itt.py"} == before
    text = copy.read_text()
    assert INSTRUMENTED_MARKER in text
    assert "itt.task_begin" in text
    compile(text, str(copy), "exec")


def test_refuses_to_overwrite_output_autoitt_did_not_write(work: Path, train: Path) -> None:
    (work / "out.py").write_text("# my own file\nprint('keep me')\n")
    before = snapshot(work)
    result = invoke("instrument", "train.py", "-o", "out.py")
    assert result.exit_code == 2
    assert "out.py" in result.stderr
    assert "--force" in result.stderr
    assert snapshot(work) == before


def test_refuses_to_overwrite_default_output_autoitt_did_not_write(work: Path, train: Path) -> None:
    (work / "train_itt.py").write_text("# hand-written\n")
    before = snapshot(work)
    result = invoke("instrument", "train.py")
    assert result.exit_code == 2
    assert "train_itt.py" in result.stderr
    assert "--force" in result.stderr
    assert snapshot(work) == before


def test_force_overwrites_output_autoitt_did_not_write(work: Path, train: Path) -> None:
    out = work / "out.py"
    out.write_text("# my own file\n")
    result = invoke("instrument", "train.py", "-o", "out.py", "--force")
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "# my own file" not in text
    assert INSTRUMENTED_MARKER in text
    assert train.read_text() == TORCH_TRAIN
    assert names(work) == {"train.py", "out.py"}


def test_overwrites_output_autoitt_wrote_earlier_without_force(work: Path, train: Path) -> None:
    out = work / "out.py"
    assert invoke("instrument", "train.py", "-o", "out.py").exit_code == 0
    assert INSTRUMENTED_MARKER in out.read_text()
    train.write_text(TORCH_TRAIN.replace("lr=0.1", "lr=0.25"))
    result = invoke("instrument", "train.py", "-o", "out.py")
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "lr=0.25" in text and "lr=0.1" not in text
    assert INSTRUMENTED_MARKER in text
    assert names(work) == {"train.py", "out.py"}


def test_in_place_rewrites_script_and_keeps_identical_backup(work: Path, train: Path) -> None:
    original = train.read_bytes()
    result = invoke("instrument", "--in-place", "train.py")
    assert result.exit_code == 0, result.output
    assert "train.py.orig" in result.stderr
    assert names(work) == {"train.py", "train.py.orig"}
    assert (work / "train.py.orig").read_bytes() == original
    rewritten = train.read_text()
    assert INSTRUMENTED_MARKER in rewritten
    assert "itt.task_begin" in rewritten
    compile(rewritten, "train.py", "exec")


def test_second_in_place_refuses_existing_backup_unless_force(work: Path, train: Path) -> None:
    original = train.read_bytes()
    assert invoke("instrument", "--in-place", "train.py").exit_code == 0
    # A fresh copy of the original; the backup of the first run is still there.
    (work / "train.py.orig").write_bytes(b"# an older backup\n" + original)
    train.write_bytes(original)
    before = snapshot(work)
    refused = invoke("instrument", "--in-place", "train.py")
    assert refused.exit_code == 2
    assert "train.py.orig" in refused.stderr
    assert "--force" in refused.stderr
    assert snapshot(work) == before

    forced = invoke("instrument", "--in-place", "--force", "train.py")
    assert forced.exit_code == 0, forced.output
    assert (work / "train.py.orig").read_bytes() == original
    assert INSTRUMENTED_MARKER in train.read_text()
    assert names(work) == {"train.py", "train.py.orig"}


@pytest.mark.parametrize("mode", [0o755, 0o640, 0o600])
def test_copy_keeps_script_permission_bits(work: Path, train: Path, mode: int) -> None:
    train.chmod(mode)
    result = invoke("instrument", "train.py")
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((work / "train_itt.py").stat().st_mode) == mode
    assert stat.S_IMODE(train.stat().st_mode) == mode


def test_in_place_keeps_script_permission_bits(work: Path, train: Path) -> None:
    train.chmod(0o755)
    assert invoke("instrument", "--in-place", "train.py").exit_code == 0
    assert stat.S_IMODE(train.stat().st_mode) == 0o755
    assert stat.S_IMODE((work / "train.py.orig").stat().st_mode) == 0o755


def test_no_temporary_files_left_after_write(work: Path, train: Path) -> None:
    assert invoke("instrument", "train.py").exit_code == 0
    assert names(work) == {"train.py", "train_itt.py"}
    # Overwriting a copy autoitt wrote, and -o, leave nothing behind either.
    assert invoke("instrument", "train.py").exit_code == 0
    assert invoke("instrument", "train.py", "-o", "other.py").exit_code == 0
    assert names(work) == {"train.py", "train_itt.py", "other.py"}


def test_crlf_line_endings_are_kept(work: Path) -> None:
    script = work / "train.py"
    data = TORCH_TRAIN.replace("\n", "\r\n").encode()
    script.write_bytes(data)
    result = invoke("instrument", "train.py")
    assert result.exit_code == 0, result.output
    assert script.read_bytes() == data
    copy = (work / "train_itt.py").read_bytes()
    assert copy.endswith(b"\r\n")
    lines = copy.split(b"\r\n")
    assert lines[-1] == b""
    assert all(b"\n" not in line and b"\r" not in line for line in lines)
    assert len(lines) > len(data.split(b"\r\n"))
    assert b"itt.task_begin" in copy
    compile(copy, "train_itt.py", "exec")


def test_tab_indented_script_gets_tab_indented_markers(work: Path) -> None:
    script = work / "train.py"
    script.write_text(TORCH_TRAIN.replace("\n    ", "\n\t"))
    assert "\t" in script.read_text() and "    " not in script.read_text()
    result = invoke("instrument", "train.py")
    assert result.exit_code == 0, result.output
    text = (work / "train_itt.py").read_text()
    compile(text, "train_itt.py", "exec")
    lines = text.splitlines()
    # No line is indented with spaces.
    assert not [line for line in lines if line.startswith(" ")]
    loop_at = next(i for i, line in enumerate(lines) if line.lstrip("\t").startswith("for step in range(3):"))
    loop_depth = len(lines[loop_at]) - len(lines[loop_at].lstrip("\t"))
    inserted_inside = [line for line in lines[loop_at + 1:]
                       if "itt." in line and len(line) - len(line.lstrip("\t")) > loop_depth]
    assert any("itt.task_begin" in line for line in inserted_inside)
    assert any("itt.task_end" in line for line in inserted_inside)
    assert all(line.startswith("\t" * (loop_depth + 1)) for line in inserted_inside)


def test_output_into_missing_folder_exits_2_and_creates_nothing(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "train.py", "-o", "nodir/out.py")
    assert result.exit_code == 2
    assert "nodir" in result.stderr
    assert "does not exist" in result.stderr
    assert snapshot(work) == before
    assert not (work / "nodir").exists()


def test_atomic_write_keeps_old_content_when_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.py"
    target.write_bytes(b"old content\n")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        files.atomic_write(target, b"new content\n")
    monkeypatch.undo()
    assert target.read_bytes() == b"old content\n"
    assert names(tmp_path) == {"out.py"}


def test_atomic_write_replaces_content_and_copies_mode(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text(TORCH_TRAIN)
    source.chmod(0o751)
    target = tmp_path / "out.py"
    target.write_bytes(b"old\n")
    files.atomic_write(target, b"new\n", mode_from=source)
    assert target.read_bytes() == b"new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert names(tmp_path) == {"train.py", "out.py"}


def test_write_failure_is_an_input_error_and_leaves_no_backup(tmp_path, monkeypatch):
    """A full disk or a read-only folder is the environment's problem: exit 2, nothing left behind."""
    import os as _os



    script = tmp_path / "train.py"
    script.write_text("for x in data:\n    loss.backward()\n")
    real_replace = _os.replace

    def failing_replace(src, dst, *args, **kwargs):
        if str(dst).endswith("train.py"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(_os, "replace", failing_replace)
    result = CliRunner().invoke(cli, ["instrument", "--in-place", str(script)])
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
    assert script.read_text() == "for x in data:\n    loss.backward()\n"


# -- the one write path ---------------------------------------------------------------------------------------------


def test_every_output_is_refused_before_any_is_written(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text(TORCH_TRAIN)
    (tmp_path / "b.py").write_text("# the user's own\n")
    outputs = [files.Output(tmp_path / "a.py", b"a\n", source), files.Output(tmp_path / "b.py", b"b\n", source)]
    with pytest.raises(files.OutputError, match="not written by autoitt"):
        files.write_outputs(outputs, files.COPY)
    assert names(tmp_path) == {"train.py", "b.py"}


def test_an_output_in_place_keeps_a_backup_and_the_source_mode(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text(TORCH_TRAIN)
    source.chmod(0o750)
    files.write_outputs([files.Output(source, b"new\n", source, in_place=True)], files.COPY)
    assert (source.read_bytes(), (tmp_path / "train.py.orig").read_text()) == (b"new\n", TORCH_TRAIN)
    assert stat.S_IMODE(source.stat().st_mode) == 0o750


@pytest.mark.parametrize("policy, message", [(files.COPY, "script itself; use --in-place"),
                                             (files.COPIES, "is the original file; choose another -o folder")])
def test_a_copy_may_not_replace_its_original_even_with_force(tmp_path: Path, policy, message) -> None:
    source = tmp_path / "train.py"
    source.write_text(TORCH_TRAIN)
    with pytest.raises(files.OutputError, match=message):
        files.write_outputs([files.Output(tmp_path / "." / "train.py", b"x\n", source)], policy, force=True)
    assert source.read_text() == TORCH_TRAIN


def test_strip_may_replace_what_it_is_given_when_forced(tmp_path: Path) -> None:
    copy = tmp_path / "train_itt.py"
    copy.write_text("copy\n")
    with pytest.raises(files.OutputError, match="exists; choose another -o or pass --force"):
        files.write_outputs([files.Output(copy, b"original\n", copy)], files.ORIGINAL)
    files.write_outputs([files.Output(copy, b"original\n", copy)], files.ORIGINAL, force=True)
    assert copy.read_bytes() == b"original\n"


def test_folders_are_made_only_for_a_folder_of_copies(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text(TORCH_TRAIN)
    nested = files.Output(tmp_path / "out" / "pkg" / "m.py", b"m\n", source)
    with pytest.raises(files.OutputError, match="does not exist"):
        files.write_outputs([nested], files.COPY)
    files.write_outputs([nested], files.COPIES)
    assert nested.target.read_bytes() == b"m\n"


def test_output_errors_are_not_source_errors(tmp_path: Path) -> None:
    from transforms import SourceError

    assert not issubclass(files.OutputError, SourceError)


@pytest.mark.parametrize("flags, expected", [
    (dict(), files.WriteBack.WRITE), (dict(in_place=True), files.WriteBack.IN_PLACE),
    (dict(diff=True, in_place=True), files.WriteBack.DIFF), (dict(check=True), files.WriteBack.CHECK),
    (dict(check=True, diff=True), files.WriteBack.DIFF),
])
def test_write_back_from_the_command_line_flags(flags, expected):
    assert files.WriteBack.from_flags(**flags) is expected
