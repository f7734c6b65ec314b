"""How ``autoitt instrument`` and ``autoitt loops`` treat their inputs.

Every test names one behaviour and checks the exit code, the message (file
name, and line where there is one) and that nothing on disk changed unless
the behaviour is a write.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import invoke, snapshot
from tests.scripts import TORCH_TRAIN
from transforms import INSTRUMENTED_MARKER


# A step loop inside a function and an epoch loop at module level, so that
# ``function`` is a str for one region and None for the other.
TRAIN_WITH_FUNCTION = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_epoch():
    for step in range(3):
        loss = model(torch.ones(4)).sum()
        loss.backward()
        optimizer.step()


for epoch in range(2):
    train_epoch()
"""

PLAIN_LOOPS = """\
total = 0
for i in range(3):
    total += i
while total:
    total -= 1
"""

@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def train(work: Path) -> Path:
    path = work / "train.py"
    path.write_text(TORCH_TRAIN)
    return path


# -- unreadable input -----------------------------------------------------------


def test_missing_file_exits_2_and_names_it(work: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "missing.py")
    assert result.exit_code == 2
    assert "missing.py" in result.stderr
    assert "no such file" in result.stderr
    assert result.stdout == ""
    assert snapshot(work) == before


def test_directory_as_script_exits_2_and_names_it(work: Path) -> None:
    (work / "somedir").mkdir()
    before = snapshot(work)
    result = invoke("instrument", "somedir")
    assert result.exit_code == 2
    assert "somedir" in result.stderr
    assert "directory" in result.stderr
    assert snapshot(work) == before


def test_syntax_error_exits_2_and_names_file_and_line(work: Path) -> None:
    (work / "broken.py").write_text("x = 1\ndef f(:\n    pass\n")
    before = snapshot(work)
    result = invoke("instrument", "broken.py")
    assert result.exit_code == 2
    assert "broken.py:2" in result.stderr
    assert "syntax error" in result.stderr
    assert snapshot(work) == before


@pytest.mark.parametrize(
    "data, line",
    [
        pytest.param(b"x = '\xff'\n", 1, id="line1"),
        # tokenize.detect_encoding reads line 2 when line 1 is a comment.
        pytest.param(b"#!/usr/bin/env python\nx = '\xff'\n", 2, id="line2-after-shebang"),
        pytest.param(b"import os\nimport sys\nx = '\xff'\n", 3, id="line3"),
    ],
)
def test_non_utf8_bytes_without_cookie_exits_2_and_names_line(work: Path, data: bytes, line: int) -> None:
    (work / "binary.py").write_bytes(data)
    before = snapshot(work)
    result = invoke("instrument", "binary.py")
    assert result.exit_code == 2
    assert f"binary.py:{line}:" in result.stderr
    assert "utf-8" in result.stderr.lower()
    assert snapshot(work) == before


def test_unknown_coding_cookie_exits_2_and_names_cookie_line(work: Path) -> None:
    (work / "cookie.py").write_bytes(b"# -*- coding: bogus -*-\nx = 1\n")
    before = snapshot(work)
    result = invoke("instrument", "cookie.py")
    assert result.exit_code == 2
    assert "cookie.py:1:" in result.stderr
    assert "encoding" in result.stderr
    assert snapshot(work) == before


def test_nul_bytes_exit_2_and_name_line(work: Path) -> None:
    (work / "nul.py").write_bytes(b"x = 1\ny = 2\x00\n")
    before = snapshot(work)
    result = invoke("instrument", "nul.py")
    assert result.exit_code == 2
    assert "nul.py:2" in result.stderr
    assert "NUL" in result.stderr
    assert snapshot(work) == before


def test_latin1_script_with_cookie_is_instrumented_in_latin1(work: Path) -> None:
    cookie = b"# -*- coding: latin-1 -*-\n"
    data = cookie + TORCH_TRAIN.replace(
        "model = ", "# caf\xe9 au lait\nname = 'na\xefve'\nmodel = ", 1
    ).encode("latin-1")
    script = work / "lat.py"
    script.write_bytes(data)
    result = invoke("instrument", "lat.py")
    assert result.exit_code == 0, result.output
    assert script.read_bytes() == data
    copy = (work / "lat_itt.py").read_bytes()
    assert copy.startswith(cookie)
    assert b"# caf\xe9 au lait\n" in copy
    assert b"name = 'na\xefve'\n" in copy
    # Written as latin-1, not re-encoded as UTF-8.
    assert "é".encode("utf-8") not in copy and "ï".encode("utf-8") not in copy
    with pytest.raises(UnicodeDecodeError):
        copy.decode("utf-8")
    text = copy.decode("latin-1")
    assert INSTRUMENTED_MARKER in text
    assert "itt.task_begin" in text
    compile(copy, "lat_itt.py", "exec")


# -- nothing to do ----------------------------------------------------------------------


def test_empty_file_exits_0_says_no_training_loops_writes_nothing(work: Path) -> None:
    (work / "empty.py").write_bytes(b"")
    before = snapshot(work)
    result = invoke("instrument", "empty.py")
    assert result.exit_code == 0
    assert "empty.py" in result.stderr
    assert "no training loops" in result.stderr
    assert snapshot(work) == before


def test_loops_that_do_not_train_exit_0_and_write_nothing(work: Path) -> None:
    (work / "plain.py").write_text(PLAIN_LOOPS)
    before = snapshot(work)
    result = invoke("instrument", "plain.py")
    assert result.exit_code == 0
    assert "plain.py" in result.stderr
    assert "no training loops" in result.stderr
    assert snapshot(work) == before


def test_already_instrumented_copy_exits_0_and_changes_nothing(work: Path, train: Path) -> None:
    first = invoke("instrument", "train.py")
    assert first.exit_code == 0, first.output
    assert (work / "train_itt.py").is_file()
    before = snapshot(work)
    result = invoke("instrument", "train_itt.py")
    assert result.exit_code == 0
    assert "train_itt.py" in result.stderr
    assert "already instrumented" in result.stderr
    assert snapshot(work) == before


# -- output that would be the script itself ------------------------------------------


@pytest.mark.parametrize("spelling", ["train.py", "./train.py", "sub/../train.py", "ABSOLUTE"])
def test_output_equal_to_script_exits_2_and_suggests_in_place(work: Path, train: Path, spelling: str) -> None:
    (work / "sub").mkdir()
    output = str(train) if spelling == "ABSOLUTE" else spelling
    before = snapshot(work)
    result = invoke("instrument", "train.py", "-o", output)
    assert result.exit_code == 2
    assert "--in-place" in result.stderr
    assert "script itself" in result.stderr
    assert snapshot(work) == before
    assert train.read_text() == TORCH_TRAIN


def test_output_symlink_to_script_exits_2_and_suggests_in_place(work: Path, train: Path) -> None:
    (work / "link.py").symlink_to("train.py")
    before = snapshot(work)
    result = invoke("instrument", "train.py", "-o", "link.py")
    assert result.exit_code == 2
    assert "link.py" in result.stderr
    assert "--in-place" in result.stderr
    assert snapshot(work) == before
    assert train.read_text() == TORCH_TRAIN


# -- usage errors -----------------------------------------------------------------


def test_in_place_with_output_is_a_usage_error(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "train.py", "--in-place", "-o", "out.py")
    assert result.exit_code == 2
    assert "Usage:" in result.stderr
    assert "--in-place and --output exclude each other" in result.stderr
    assert snapshot(work) == before


def test_unknown_option_exits_2(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "train.py", "--bogus")
    assert result.exit_code == 2
    assert "No such option" in result.stderr
    assert "--bogus" in result.stderr
    assert snapshot(work) == before


@pytest.mark.parametrize("label", ["foo", "=x", "x=warmup", "5=", '5=a"b', "5=a\\b"])
def test_label_with_bad_syntax_exits_2(work: Path, train: Path, label: str) -> None:
    before = snapshot(work)
    result = invoke("instrument", "train.py", "--label", label)
    assert result.exit_code == 2
    assert "--label" in result.stderr
    assert snapshot(work) == before


@pytest.mark.parametrize("option, value, shown", [
    ("--label", "5=a\x1bb", "'\\x1b'"), ("--label", "5=a\tb", "'\\t'"), ("--label", "5=a\x7fb", "'\\x7f'"),
    ("--label", "5=a\x9bb", "'\\x9b'"), ("--label", "5=a\u2028b", "'\\u2028'"),
    ("--label", "5=a\u202eb", "'\\u202e'"), ("--domain", "a\x1bb", "'\\x1b'"), ("--domain", "a\nb", "'\\n'"),
], ids=["label-esc", "label-tab", "label-del", "label-c1-csi", "label-line-separator", "label-bidi-override",
        "domain-esc", "domain-newline"])
def test_a_control_character_in_a_label_or_domain_exits_2_showing_it_escaped(
        work: Path, train: Path, option: str, value: str, shown: str) -> None:
    # an ESC in a label made steps.svg unparsable and reached the terminal raw
    before = snapshot(work)
    result = invoke("instrument", "train.py", option, value)
    assert result.exit_code == 2
    error = result.stderr.splitlines()[-1]  # one line: a newline or U+2028 in it would have split it
    assert error.startswith(f"Error: Invalid value for '{option}': ")
    assert error.endswith(f"{shown} in 'a{shown[1:-1]}b'")
    assert value[-2] not in error
    assert snapshot(work) == before


def test_loops_shows_a_note_and_a_file_name_as_written_not_as_markup_or_emoji(work: Path) -> None:
    # rich reads `:100:` as its emoji code (💯) and `[bold]` as a style unless told not to
    script = "import ittapi.compat as itt\n" + "\n" * 97 + (
        'domain = itt.domain_create("mine")\n'
        "for epoch in range(2):  # line 100\n"
        '    itt.task_begin(domain, "my_epoch")\n'
        "    itt.task_end(domain)\n")
    (work / "mine [bold].py").write_text(script)
    result = invoke("loops", "mine [bold].py")
    assert result.exit_code == 0, result.output
    assert "mine [bold].py:100: epoch loop left to the script's own markers" in result.stdout
    assert "\N{HUNDRED POINTS SYMBOL}" not in result.stdout


def test_steps_zero_exits_2(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "train.py", "--steps", "0")
    assert result.exit_code == 2
    assert "--steps" in result.stderr
    assert snapshot(work) == before


# -- --check ------------------------------------------------------------------


def test_check_exits_1_for_script_that_would_change_and_writes_nothing(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "--check", "train.py")
    assert result.exit_code == 1
    assert "would instrument train.py" in result.stderr
    assert snapshot(work) == before


def test_check_exits_0_for_already_instrumented_script(work: Path, train: Path) -> None:
    assert invoke("instrument", "train.py").exit_code == 0
    before = snapshot(work)
    result = invoke("instrument", "--check", "train_itt.py")
    assert result.exit_code == 0
    assert "already instrumented" in result.stderr
    assert snapshot(work) == before


def test_check_exits_0_for_script_without_loops(work: Path) -> None:
    (work / "noloops.py").write_text("import torch\nx = torch.ones(3)\n")
    before = snapshot(work)
    result = invoke("instrument", "--check", "noloops.py")
    assert result.exit_code == 0
    assert "no training loops" in result.stderr
    assert snapshot(work) == before


# -- --diff -----------------------------------------------------------------------


def test_diff_writes_nothing_and_shows_only_inserted_lines(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "--diff", "train.py")
    assert result.exit_code == 0
    assert snapshot(work) == before
    lines = result.stdout.splitlines()
    assert lines[0] == "--- train.py"
    assert lines[1] == "+++ train_itt.py"
    added = [line for line in lines if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in lines if line.startswith("-") and not line.startswith("---")]
    assert any("itt.task_begin" in line for line in added)
    assert removed == []
    assert [line for line in lines if line.startswith("---")] == ["--- train.py"]
    # The re-indented body is shown as context, as it reads in the copy.
    assert any(line.startswith(" ") and line.strip() == "loss.backward()" for line in lines)
    assert not any("loss.backward()" in line for line in added)


def test_diff_style_unified_shows_removed_and_added_body_lines(work: Path, train: Path) -> None:
    before = snapshot(work)
    result = invoke("instrument", "--diff", "--diff-style", "unified", "train.py")
    assert result.exit_code == 0
    assert snapshot(work) == before
    lines = result.stdout.splitlines()
    assert lines[0] == "--- train.py"
    assert lines[1] == "+++ train_itt.py"
    assert "-for step in range(3):" in lines
    assert "-    loss.backward()" in lines
    added = [line for line in lines if line.startswith("+") and not line.startswith("+++")]
    assert any(line.strip("+ ") == "for step in range(3):" and line != "+for step in range(3):" for line in added)
    assert any(line.strip("+ ") == "loss.backward()" and line != "+    loss.backward()" for line in added)
    assert any("itt.task_begin" in line for line in added)


# -- loops ---------------------------------------------------------------------


def test_loops_json_on_missing_file_exits_2_with_empty_stdout(work: Path) -> None:
    before = snapshot(work)
    result = invoke("loops", "--json", "missing.py")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "missing.py" in result.stderr
    assert snapshot(work) == before


def test_loops_json_prints_regions_with_exact_keys_and_types(work: Path) -> None:
    (work / "train.py").write_text(TRAIN_WITH_FUNCTION)
    before = snapshot(work)
    result = invoke("loops", "--json", "train.py")
    assert result.exit_code == 0
    assert snapshot(work) == before
    regions = json.loads(result.stdout)
    assert isinstance(regions, list) and len(regions) == 2
    types = {"line": int, "end_line": int, "role": str, "label": str, "reason": str, "path": str}
    for region in regions:
        assert set(region) == {"line", "end_line", "role", "function", "label", "reason", "path"}
        for key, kind in types.items():
            assert type(region[key]) is kind, (key, region[key])
        assert region["function"] is None or type(region["function"]) is str
    by_line = {region["line"]: region for region in regions}
    assert by_line[8]["role"] == "step" and by_line[8]["end_line"] == 11
    assert by_line[8]["function"] == "train_epoch"
    assert by_line[14]["role"] == "epoch" and by_line[14]["function"] is None


def test_loops_on_syntax_error_exits_2_and_names_line(work: Path) -> None:
    (work / "broken.py").write_text("import torch\n\nfor x in :\n    pass\n")
    before = snapshot(work)
    result = invoke("loops", "broken.py")
    assert result.exit_code == 2
    assert "broken.py:3" in result.stderr
    assert snapshot(work) == before


# -- entry points --------------------------------------------------------------------


def _console_script() -> str:
    beside = Path(sys.executable).parent / "autoitt"
    if beside.exists():
        return str(beside)
    found = shutil.which("autoitt")
    assert found is not None, "the autoitt console script is not installed"
    return found


def test_python_m_instrumenter_help_exits_0(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "instrumenter", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    assert "instrument" in proc.stdout and "loops" in proc.stdout


def test_autoitt_console_script_help_exits_0(tmp_path: Path) -> None:
    proc = subprocess.run([_console_script(), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: autoitt" in proc.stdout
    assert "instrument" in proc.stdout and "loops" in proc.stdout
    assert list(tmp_path.iterdir()) == []
