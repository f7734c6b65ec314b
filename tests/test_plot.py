"""``steps.svg``: a panel per step loop with its own scales, the warm-up shaded, epochs and evaluations marked, the
legend above the data; one point per step for a short run, a bounded drawing by step range for a long one."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import numpy as np

from instrumenter.builtin.output.plot import MAX_EPOCH_MARKS, MAX_EVAL_MARKS, MAX_MARKS, MAX_PANELS, MAX_POINTS, \
    step_time_svg
from instrumenter.builtin.statistics.step_marks import StepMarks
from instrumenter.builtin.statistics.summary import StepStats

SVG = "{http://www.w3.org/2000/svg}"


def _steps(durations, label="step", **fields):
    ordered = sorted(durations)
    return StepStats(label, fields.pop("count", len(durations)), sum(durations) / len(durations),
                     ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.95)], durations[0], 0.0,
                     tuple(durations), **fields)


def _draw(*steps, marks=None):
    return ElementTree.fromstring(step_time_svg(list(steps), "title", marks))


def _marks(epochs=(), evals=(), during=None, partial=False):
    evals = np.array(evals, np.int64)
    return StepMarks(np.array(epochs, np.int64), evals,
                     np.zeros(len(evals), np.bool_) if during is None else np.array(during, np.bool_), partial)


def _all(root, tag, cls=None, panel=None):
    return [e for e in root.iter(f"{SVG}{tag}") if (cls is None or cls in e.get("class", "").split())
            and (panel is None or e.get("data-panel") == str(panel))]


def _points(root, panel=0):
    line, = _all(root, "polyline", "steps", panel)
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


def _area(root, panel=0):
    rect, = _all(root, "rect", "plot-area", panel)
    return tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))


def _legend(root, panel=0):
    return " ".join(t.text for t in _all(root, "text", "legend", panel))


STEADY = [0.010 + 0.0001 * (i % 5) for i in range(30)]


def test_a_short_run_has_one_point_per_step_and_no_band():
    root = _draw(_steps([0.001 * (i % 7 + 1) for i in range(50)]))
    assert len(root.find(f"{SVG}polyline").get("points").split()) == 50  # the first series' line, at the top level
    assert not _all(root, "polygon", "band")


def test_a_million_steps_stay_within_the_point_budget():
    durations = [0.001 * (1 + (i % 97) / 97) for i in range(1_000_000)]
    durations[500_000] = 0.5  # one outlier
    marks = {"step": _marks(epochs=range(0, 1_000_000, 1000), evals=range(999, 1_000_000, 1000))}
    svg = step_time_svg([_steps(durations)], "title", marks)
    root = ElementTree.fromstring(svg)
    assert len(_points(root)) <= MAX_POINTS
    assert _all(root, "polygon", "band")  # the min-max band
    circles = _all(root, "circle", "mark")
    assert len(circles) <= MAX_MARKS + 1
    assert any("500.00 ms" in c.find(f"{SVG}title").text for c in circles)  # the outlier is marked
    assert len(_all(root, "line", "epoch")) <= MAX_EPOCH_MARKS
    assert len(_all(root, "path", "eval")) <= MAX_EVAL_MARKS
    assert len(svg) < 2_000_000


def test_a_long_run_marks_its_outlying_ranges_not_every_range_reaching_its_95th_percentile():
    durations = [0.001 * (1 + (i % 97) / 97) for i in range(1_000_000)]  # every range reaches the same maximum
    durations[500_000] = 0.5
    marked = [c.get("data-step") for c in _all(_draw(_steps(durations)), "circle", "mark")]
    assert len(marked) == 2 and marked[1] == str(500_000 // 500 * 500 + 1)  # the first range, and the outlier's


def test_each_step_loop_gets_its_own_panel_and_scale():
    slow, fast = _steps([0.030 + 0.001 * (i % 3) for i in range(40)], "train"), \
        _steps([0.001 + 0.0001 * (i % 3) for i in range(60)], "eval_step")
    root = _draw(slow, fast)
    assert {a.get("data-label") for a in _all(root, "rect", "plot-area")} == {"train", "eval_step"}
    tops = [max(float(t.text) for t in _all(root, "text", "ytick", panel)) for panel in (0, 1)]
    assert tops[0] >= 32 and tops[1] <= 2  # the fast loop is not flattened by the slow one
    (_, y0, _, h0), (_, y1, _, _) = _area(root, 0), _area(root, 1)
    assert y0 + h0 < y1  # stacked
    assert len(_points(root, 0)) == 40 and len(_points(root, 1)) == 60
    assert float(root.get("height")) > float(_draw(slow).get("height"))  # the picture grows with its panels


def test_more_step_loops_than_panels_are_left_to_summary_json():
    root = _draw(*(_steps(STEADY, f"loop{n}") for n in range(MAX_PANELS + 2)))
    assert len(_all(root, "rect", "plot-area")) == MAX_PANELS
    assert any(t.text == "2 more step loops in summary.json" for t in _all(root, "text", "note"))


def test_warmup_is_shaded():
    root = _draw(_steps([0.050, 0.030, 0.020] + STEADY, warmup_steps=3))
    shade, = _all(root, "rect", "warmup")
    left, right = float(shade.get("x")), float(shade.get("x")) + float(shade.get("width"))
    xs = [x for x, _ in _points(root)]
    assert left <= xs[0] and xs[2] < right < xs[3]  # steps 1 to 3
    assert [t.text for t in _all(root, "text", "warmup-label")] == ["warm-up"]
    assert "warm-up 3 steps" in _legend(root)


def test_a_run_without_warmup_has_no_shading():
    root = _draw(_steps(STEADY))
    assert not _all(root, "rect", "warmup") and "no warm-up" in _legend(root)


def test_epoch_boundaries_are_drawn_at_the_first_step_of_each_epoch():
    root = _draw(_steps(STEADY), marks={"step": _marks(epochs=[0, 10, 20])})
    lines = _all(root, "line", "epoch")
    assert [line.get("data-step") for line in lines] == ["11", "21"]  # the first epoch's start is the y axis
    xs = [x for x, _ in _points(root)]
    for line, first in zip(lines, (10, 20)):
        assert xs[first - 1] < float(line.get("x1")) < xs[first]
    assert "3 epochs" in _legend(root)


def test_evaluations_are_marked_after_the_step_they_followed():
    root = _draw(_steps(STEADY), marks={"step": _marks(evals=[9, 19], during=[False, True])})
    after, during = _all(root, "path", "eval")
    assert (after.get("data-step"), during.get("data-step")) == ("10", "20")
    assert after.find(f"{SVG}title").text == "an evaluation ran after step 10"
    assert during.find(f"{SVG}title").text == "an evaluation ran during step 20"
    xs = [x for x, _ in _points(root)]
    tip = [float(n) for n in re.findall(r"[-\d.]+", after.get("d"))]
    assert xs[9] < tip[0] + 4 < xs[10]  # between step 10 and step 11
    _, top, _, _ = _area(root)
    assert tip[1] < top  # above the data


def test_marks_are_bounded_and_say_every_kth():
    marks = {"step": _marks(epochs=range(0, 10_000, 10), evals=range(9, 10_000, 10))}
    root = _draw(_steps([0.001] * 10_000), marks=marks)
    assert len(_all(root, "line", "epoch")) <= MAX_EPOCH_MARKS
    assert len(_all(root, "path", "eval")) <= MAX_EVAL_MARKS
    legend = _legend(root)
    assert "1,000 epochs; every 10th boundary drawn" in legend and "(1,000; every 17th drawn)" in legend


def test_marks_of_a_run_past_its_trace_limit_say_they_cover_the_kept_steps_only():
    root = _draw(_steps(STEADY, count=1000), marks={"step": _marks(epochs=[0, 10], partial=True)})
    legend = _legend(root)
    assert "the first 30 of 1,000 steps" in legend and "epoch marks for the kept steps only" in legend


def test_the_legend_is_outside_the_plotting_area():
    root = _draw(_steps([0.050] + STEADY, warmup_steps=1), _steps(STEADY, "other"),
                 marks={"step": _marks(epochs=[0, 10], evals=[5])})
    for panel in (0, 1):
        _, top, _, height = _area(root, panel)
        legend = _all(root, "text", "legend", panel)
        assert legend and all(float(t.get("y")) < top for t in legend)
        assert all(top <= y <= top + height for _, y in _points(root, panel))
    assert float(_all(root, "text", "legend", 1)[0].get("y")) > _area(root, 0)[1] + _area(root, 0)[3]


def test_the_x_axis_counts_the_runs_steps_from_the_first_collected_one():
    root = _draw(_steps(STEADY, first_step=101))
    labels = [t.text for t in _all(root, "text", "xtick")]
    assert labels[0] == "101" and labels[-1] == "130" and "1" not in labels
    assert "101 to 130" in _legend(root)


def test_a_step_far_slower_than_the_rest_sits_on_the_top_edge_saying_its_time():
    root = _draw(_steps([0.5] + STEADY))
    _, top, _, _ = _area(root)
    assert max(float(t.text) for t in _all(root, "text", "ytick")) < 20  # the scale is the steady steps'
    mark, = _all(root, "circle", "offscale")
    assert float(mark.get("cy")) == top and "500.00 ms" in mark.find(f"{SVG}title").text
    assert [t.text for t in _all(root, "text", "offscale-label")] == ["500 ms"]
    assert "1 step above" in _legend(root)


def test_a_run_without_steps_says_so():
    root = _draw()
    assert [t.text for t in _all(root, "text", "note")] == ["no step tasks were recorded"]


def test_any_step_label_and_title_give_well_formed_xml_showing_control_characters_escaped():
    # a task name comes from the trace (the script's own ITT calls): XML 1.0 forbids most control characters even
    # as character references, so an ESC in a label made steps.svg unparsable
    controls = "".join(map(chr, [*range(0x20), 0x7f, 0x85, 0x9b, 0x2028, 0x202e, 0xfffe, 0xdcff]))
    label = f"a\x1b[31m\n[bold]:100: <&\"'>{controls}"
    root = ElementTree.fromstring(step_time_svg([_steps(STEADY, label=label)], f"Step time, x\x1b.py{controls}"))
    head = _all(root, "text", "legend", 0)[0].text
    assert head.startswith("a\\x1b[31m\\n[bold]:100: <&\"'>\\x00\\x01")
    assert "\\x7f\\x85\\x9b\\u2028\\u202e\\ufffe\\udcff" in head
    assert _all(root, "text", "title")[0].text.startswith("Step time, x\\x1b.py\\x00")
    assert _all(root, "rect", "plot-area", 0)[0].get("data-label").startswith("a\\x1b[31m\\n")


def test_a_multi_rank_run_draws_a_line_per_rank_over_the_same_step_numbers():
    from instrumenter.builtin.statistics.summary import RankStats

    ranks = [RankStats(0, [10], [_steps([0.010] * 8)]), RankStats(1, [11], [_steps([0.012] * 8)])]
    whole = _steps([0.010] * 8 + [0.012] * 8)
    root = ElementTree.fromstring(step_time_svg([whole], "title", None, ranks))
    lines = _all(root, "polyline", "steps")
    assert [line.get("data-rank") for line in lines] == ["0", "1"]
    assert max(int(tick.get("data-step")) for tick in _all(root, "text", "xtick")) == 8
    legend = " ".join(text.text for text in _all(root, "text", "legend"))
    assert "on each of 2 ranks" in legend and "one line per rank: rank 0 blue, rank 1 red" in legend


def test_a_single_rank_or_plain_run_draws_one_line():
    root = _draw(_steps([0.010] * 8))
    assert [line.get("data-rank") for line in _all(root, "polyline", "steps")] == [None]


def test_the_legend_says_what_the_filled_dots_are():
    legend = " ".join(text.text for text in _all(_draw(_steps([0.010] * 8)), "text", "legend"))
    assert "● the first step, and steps above the 95th percentile" in legend
