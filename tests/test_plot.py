"""``steps.svg``: one point per step for a short run; a bounded drawing by step range for a long one."""

from __future__ import annotations

from xml.etree import ElementTree

from instrumenter.builtin.plot import MAX_MARKS, MAX_POINTS, step_time_svg
from instrumenter.summary import StepStats

SVG = "{http://www.w3.org/2000/svg}"


def _steps(durations):
    ordered = sorted(durations)
    return StepStats("step", len(durations), sum(durations) / len(durations), ordered[len(ordered) // 2],
                     ordered[int(len(ordered) * 0.95)], durations[0], 0.0, tuple(durations))


def _draw(durations):
    return ElementTree.fromstring(step_time_svg([_steps(durations)], "title"))


def test_a_short_run_has_one_point_per_step_and_no_band():
    root = _draw([0.001 * (i % 7 + 1) for i in range(50)])
    assert len(root.find(f"{SVG}polyline").get("points").split()) == 50
    assert root.find(f"{SVG}polygon") is None


def test_a_long_run_is_drawn_by_step_range_within_the_point_budget():
    durations = [0.001 * (1 + (i % 97) / 97) for i in range(1_000_000)]
    durations[500_000] = 0.5  # one outlier
    svg = step_time_svg([_steps(durations)], "title")
    root = ElementTree.fromstring(svg)
    assert len(root.find(f"{SVG}polyline").get("points").split()) <= MAX_POINTS
    assert root.find(f"{SVG}polygon") is not None  # the min-max band
    circles = root.findall(f"{SVG}circle")
    assert len(circles) <= MAX_MARKS + 1
    assert any("500.00 ms" in c.find(f"{SVG}title").text for c in circles)  # the outlier is marked
    assert len(svg) < 2_000_000
