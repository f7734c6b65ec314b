"""Each sample's instrumented copy is exactly the checked-in expected file.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/test_golden.py``
and review the diff of tests/golden/ like any other code change.
"""

from __future__ import annotations

import difflib
import os

import pytest

from tests.conftest import GOLDEN, SCRIPTS, script_id
from transforms import Outcome, instrument_source, strip_markers


def _instrument(path):
    return instrument_source(path.read_bytes(), path.name)


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_instrumented_copy_matches_golden_file(script):
    result = _instrument(script)
    assert result.outcome is Outcome.INSTRUMENTED
    golden = GOLDEN / f"{script.stem}_itt.py"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_bytes(result.output)
    assert golden.exists(), f"no golden file {golden}; run with UPDATE_GOLDEN=1"
    expected = golden.read_text()
    actual = result.output.decode()
    assert actual == expected, "".join(
        difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), str(golden), "actual")
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_the_golden_copy_read_back_from_disk_strips_to_its_script(script):
    # The safety check strips the rewrite's own tree; `autoitt strip` parses the file again.
    golden = GOLDEN / f"{script.stem}_itt.py"
    assert strip_markers(golden.read_bytes(), golden.name) == script.read_bytes()


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_a_copy_made_before_the_runtime_had_its_own_package_still_strips_to_its_script(script):
    # Earlier copies import the runtime as instrumenter.collection (instrumenter.window): still autoitt's header.
    golden = GOLDEN / f"{script.stem}_itt.py"
    earlier = golden.read_bytes().replace(b"from instrumenter.runtime.", b"from instrumenter.")
    assert earlier != golden.read_bytes()
    assert strip_markers(earlier, golden.name) == script.read_bytes()


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_instrumenting_a_copy_again_changes_nothing(script):
    copy = _instrument(script).output
    again = instrument_source(copy, f"{script.stem}_itt.py")
    assert again.outcome is Outcome.ALREADY_INSTRUMENTED
    assert again.output is None


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_original_lines_are_kept_in_order_and_only_indented_inside_regions(script):
    result = _instrument(script)
    before = script.read_text().splitlines(True)
    after = result.output.decode().splitlines(True)
    inside = set()
    for region in result.detection.regions:
        inside.update(range(region.line, region.end_line + 1))
    matcher = difflib.SequenceMatcher(None, [l.strip() for l in before], [l.strip() for l in after], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        assert tag in ("equal", "insert"), f"original lines {i1 + 1}-{i2} were {tag}d"
        if tag != "equal":
            continue
        for offset, (old, new) in enumerate(zip(before[i1:i2], after[j1:j2])):
            line = i1 + offset + 1
            if line in inside:
                # re-indented by whole indentation units, content untouched
                assert new.endswith(old.lstrip()) or not old.strip(), f"line {line} changed: {old!r} -> {new!r}"
            else:
                assert new == old, f"line {line} outside any region changed: {old!r} -> {new!r}"
