"""Lines of an instrumented copy map back to the lines of the original script.

VTune reports the copy's lines (it ran the copy); autoitt shows the original's.
"""

from __future__ import annotations

import textwrap

import pytest

from instrumenter.linemap import build
from tests.conftest import GOLDEN, SCRIPTS, script_id

ORIGINAL = textwrap.dedent(
    """\
    import torch
    model = make()
    for batch in loader:
        loss = model(batch)
        loss.backward()
    print("done")
    """
)

COPY = textwrap.dedent(
    """\
    import torch
    import ittapi.compat as itt
    _autoitt_domain = itt.domain_create("autoitt.train")
    model = make()
    itt.resume()
    try:
        for batch in loader:
            itt.task_begin(_autoitt_domain, "step")
            try:
                loss = model(batch)
                loss.backward()
            finally:
                itt.task_end(_autoitt_domain)
    finally:
        itt.pause()
    print("done")
    """
)

#: The step loop of ORIGINAL: lines 3-5.
REGIONS = [(3, 5)]


def test_original_lines_map_to_themselves_even_when_reindented():
    lines = build(ORIGINAL, COPY, REGIONS)
    assert [lines.original_line(n) for n in (1, 4, 7, 10, 11, 16)] == [1, 2, 3, 4, 5, 6]


def test_markers_before_a_line_map_to_the_line_they_precede():
    lines = build(ORIGINAL, COPY, REGIONS)
    assert [lines.original_line(n) for n in (2, 3)] == [2, 2]  # the import and domain go with `model = ...`
    assert [lines.original_line(n) for n in (5, 6)] == [3, 3]  # resume and try go with the `for`
    assert [lines.original_line(n) for n in (8, 9)] == [4, 4]  # task_begin and try go with the body's first line


def test_markers_closing_a_region_map_to_the_regions_line():
    lines = build(ORIGINAL, COPY, REGIONS)
    assert [lines.original_line(n) for n in (12, 13, 14, 15)] == [3, 3, 3, 3]


def test_without_regions_closing_markers_map_to_the_next_line():
    lines = build(ORIGINAL, COPY)
    assert lines.original_line(13) == 6


def test_markers_after_the_last_line_map_to_the_last_line():
    lines = build("a = 1\nb = 2\n", "a = 1\nb = 2\nitt.pause()\n")
    assert lines.original_line(3) == 2


def test_lines_outside_the_copy_have_no_original():
    lines = build(ORIGINAL, COPY)
    assert lines.original_line(0) is None
    assert lines.original_line(len(COPY.splitlines()) + 1) is None


def test_an_unchanged_copy_maps_every_line_to_itself():
    lines = build(ORIGINAL, ORIGINAL)
    assert lines.original == tuple(range(1, len(ORIGINAL.splitlines()) + 1))
    assert lines.complete


def test_a_script_edited_after_profiling_is_flagged_incomplete():
    edited = ORIGINAL.replace('print("done")', 'print("finished")')
    lines = build(edited, COPY, REGIONS)
    assert not lines.complete
    assert lines.original_line(16) == 6  # still the best guess for the changed line


@pytest.mark.parametrize("script", [s for s in SCRIPTS if (GOLDEN / f"{s.stem}_itt.py").exists()], ids=script_id)
def test_every_line_of_a_real_copy_maps_to_the_same_code_or_is_a_marker(script):
    original = script.read_text()
    copy = (GOLDEN / f"{script.stem}_itt.py").read_text()
    lines = build(original, copy)
    before = original.splitlines()
    assert lines.complete
    for number, text in enumerate(copy.splitlines(), start=1):
        mapped = before[lines.original_line(number) - 1]
        marker = ("itt" in text or text.strip() in ("try:", "finally:", "") or text.strip().startswith("#"))
        assert text.strip() == mapped.strip() or marker, f"copy line {number} {text!r} -> {mapped!r}"
    mapped_lines = {lines.original_line(n) for n in range(1, len(copy.splitlines()) + 1)}
    assert mapped_lines == set(range(1, len(before) + 1))
