"""Lines of an instrumented copy map back to the lines of the original script, exactly.

The rewrite records every line it inserts; every other line of the copy is
the next line of the original. Profilers and tracebacks see the copy, autoitt
shows the original.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import SCRIPTS, script_id
from transforms import LineMap, Mode, instrument_source

STEP_LOOP = b"import torch\nmodel = make()\nfor batch in loader:\n    loss = model(batch)\n    loss.backward()\nprint('done')\n"
_NEWLINE = re.compile(r"\r\n|\r|\n")


def assert_exact(original: bytes, copy: bytes, line_map: LineMap, encoding: str = "utf-8") -> None:
    """Every copy line not inserted is the next original line (re-indented at most), in order; all are used."""
    before = _NEWLINE.split(original.decode(encoding))
    after = _NEWLINE.split(copy.decode(encoding))
    assert line_map.copy_lines == len(after) - (after[-1] == "")
    assert line_map.original_lines == len(before) - (before[-1] == "")
    seen = []
    for number in range(1, line_map.copy_lines + 1):
        shown = line_map.original_line(number)
        assert 1 <= shown <= line_map.original_lines
        if not line_map.is_inserted(number):
            assert after[number - 1].strip() == before[shown - 1].strip(), (number, after[number - 1])
            seen.append(shown)
    assert seen == list(range(1, line_map.original_lines + 1))


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_every_line_of_a_real_copy_is_an_original_line_or_an_inserted_one(script):
    result = instrument_source(script.read_bytes(), script.name)
    assert_exact(script.read_bytes(), result.output, result.line_map)
    for number, text in enumerate(result.output.decode().splitlines(), start=1):
        if result.line_map.is_inserted(number):
            assert "itt" in text or text.strip() in ("try:", "finally:", ""), (number, text)


def test_the_lines_inserted_for_a_loop_show_as_the_loops_line():
    result = instrument_source(STEP_LOOP, "train.py", Mode(torch_ops="off"))
    copy = result.output.decode().splitlines()
    inserted = [n for n in range(1, len(copy) + 1) if result.line_map.is_inserted(n)]
    markers = [n for n in inserted if copy[n - 1].strip().startswith(("itt.", "try:", "finally:"))]
    assert markers and {result.line_map.original_line(n) for n in markers} == {3}


def test_header_lines_show_as_the_line_they_were_inserted_before():
    result = instrument_source(STEP_LOOP, "train.py")
    copy = result.output.decode().splitlines()
    header = [n for n, text in enumerate(copy, start=1)
              if "import ittapi" in text or "domain_create" in text or "autoitt: instrumented" in text]
    assert [result.line_map.is_inserted(n) for n in header] == [True, True, True]
    assert [result.line_map.original_line(n) for n in header] == [2, 2, 2]  # after `import torch`


def test_a_script_with_nothing_to_instrument_maps_every_line_to_itself():
    result = instrument_source(b"a = 1\nb = 2\n", "plain.py")
    assert result.line_map == LineMap.identity(2)
    assert [result.line_map.original_line(n) for n in (1, 2)] == [1, 2]


@pytest.mark.parametrize("before", [b"x = 1\n\x0c\n", "s = '\u2028'\n".encode(), b"x = 1\r\n"],
                         ids=["form-feed", "u2028-in-string", "crlf"])
def test_lines_are_numbered_as_python_numbers_them(before):
    source = before + STEP_LOOP.replace(b"\n", b"\r\n" if b"\r\n" in before else b"\n")
    result = instrument_source(source, "separators.py")
    assert_exact(source, result.output, result.line_map)


def test_lines_outside_the_copy_have_no_original():
    result = instrument_source(STEP_LOOP, "train.py")
    assert result.line_map.original_line(0) is None
    assert result.line_map.original_line(result.line_map.copy_lines + 1) is None


def test_the_map_survives_json():
    line_map = instrument_source(STEP_LOOP, "train.py").line_map
    assert LineMap.from_json(line_map.to_json()) == line_map


def test_counts_that_do_not_add_up_are_refused():
    with pytest.raises(ValueError, match="cannot hold"):
        LineMap.from_inserted(10, 9, {2: None, 3: 1})
