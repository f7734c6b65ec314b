"""``steps.svg``: step duration over the run, so warm-up, epochs, evaluations and outliers stand out.

Plain SVG written by hand (numpy for the ranges): no plotting library in autoitt's dependencies.

One panel per step loop (at most :data:`MAX_PANELS`), stacked, each with its own scales; its legend is
the text above it, never over the data. In a panel: the step times as a line (the steady median
dashed), points above the 95th percentile marked, the warm-up shaded, a thin vertical line where a new
epoch starts and a triangle above the steps after which an evaluation ran (:mod:`..statistics.step_marks`). The x
axis counts the run's steps (from ``first_step``); in a multi-rank run each rank is a line of its own over
the same step numbers (the ith step of every rank is the run's ith step), the warm-up and the marks the first
rank's. The legend says what the filled dots are. When a few steps are far slower than the rest (the
first ones, an evaluation inside a step), the y axis stops at a scale the others are readable on
(:data:`OFF_SCALE`), and the slower ones are drawn on its top edge as hollow marks saying their time.

A run of more than :data:`MAX_POINTS` steps is drawn by step range: the median of each range as the line,
its minimum to maximum as a band, a mark at the maximum of ranges that reach above the 95th percentile
and among the highest 5 % of the ranges (at most :data:`MAX_MARKS` of them); at most
:data:`MAX_EPOCH_MARKS` epoch lines and :data:`MAX_EVAL_MARKS` evaluation marks are drawn (every k-th,
and the panel says so). So the file stays small whatever the run's length.

Elements carry classes (``legend``, ``plot-area``, ``steps``, ``band``, ``median``, ``mark``,
``offscale``, ``offscale-label``, ``warmup``, ``warmup-label``, ``epoch``, ``eval``, ``xtick``, ``ytick``,
``note``), those of a panel a ``data-panel`` (its number, from 0), a rank's line, band and marks a
``data-rank``, and the marks a ``data-step`` (the run's step number), for tests and for anyone reading the
file.
"""

from __future__ import annotations

import math
import re
from typing import List, Mapping, Optional, Sequence

import numpy as np
from xml.sax import saxutils

from ...profile.console import printable

_WIDTH = 760
_LEFT, _RIGHT = 68, 20
_TITLE_H = 34
_LINE_H = 15      # a line of a panel's legend
_STRIP_H = 14     # between the legend and the plotting area: evaluation marks, the warm-up's label
_PLOT_H = 150
_AXIS_H = 24      # below the plotting area: the step numbers
_GAP = 10         # between panels
_FOOT_H = 22      # the x axis's caption, and a note per line
_CHARS_PER_LINE = 98  # of a legend line, at 12 px
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_COLOUR_NAMES = dict(zip(_COLOURS, ("blue", "red", "green", "purple", "orange", "brown", "pink", "cyan")))
#: At most this many points per series (one per step, or per range of steps).
MAX_POINTS = 2000
#: At most this many marked points per series.
MAX_MARKS = 200
#: At most this many panels (step loops); the others are in summary.json.
MAX_PANELS = 6
#: At most this many epoch lines, and evaluation marks, per panel (every k-th beyond): some pixels apart.
MAX_EPOCH_MARKS = 100
MAX_EVAL_MARKS = 60
#: The y axis stops below steps slower than this many times the steady 95th percentile (when some are).
OFF_SCALE = 3.0
#: At most this many off-scale marks get their time written beside them.
_OFF_SCALE_LABELS = 3


_PANEL_TAG = re.compile(r"^<(\w+) ")


def escape(text: str) -> str:
    """``text`` (a task name, a script's name: anything a trace or the user chose) as XML character data.
    XML 1.0 allows most control characters not even as references, so they are written as visible escapes
    (``\\x1b``, as on the terminal): the file parses whatever the names."""
    return saxutils.escape(printable(text))


def quoteattr(text: str) -> str:
    """``text`` as a quoted XML attribute value, its control characters written as :func:`escape` writes them."""
    return saxutils.quoteattr(printable(text))


class _Range:
    """Steps ``first..last`` (0-based) of a series, drawn at their middle: median, min, max (ms)."""

    __slots__ = ("first", "last", "median", "low", "high")

    def __init__(self, first: int, last: int, median: float, low: float, high: float) -> None:
        self.first, self.last, self.median, self.low, self.high = first, last, median, low, high


def _ranges(values: np.ndarray) -> List[_Range]:
    size = max(1, math.ceil(len(values) / MAX_POINTS))
    whole = len(values) // size * size
    rows = [values[:whole].reshape(-1, size)] + ([values[whole:].reshape(1, -1)] if whole < len(values) else [])
    ranges = []
    for row in rows:
        ordered = np.sort(row, axis=1)
        # the upper median, as a range of one step or of many is drawn the same way
        stats = zip(ordered[:, ordered.shape[1] // 2].tolist(), ordered[:, 0].tolist(), ordered[:, -1].tolist())
        for median, low, high in stats:
            first = len(ranges) * size
            ranges.append(_Range(first, min(first + size, len(values)) - 1, median, low, high))
    return ranges


def _nice_step(raw: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at least ``raw`` (> 0)."""
    exponent = math.floor(math.log10(raw))
    return next(m * 10 ** exponent for m in (1, 2, 5, 10) if m * 10 ** exponent >= raw)


def _nice_ticks(top: float, count: int = 5) -> List[float]:
    """Round tick values (1, 2 or 5 times a power of ten) from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    step = _nice_step(top / count)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


def _ms(value: float) -> str:
    """A time in ms, three significant digits (whole ms from 100)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _every(indices: np.ndarray, limit: int) -> tuple:
    """``indices``, or every k-th of them when more than ``limit``: (shown, k)."""
    k = max(1, math.ceil(len(indices) / limit))
    return indices[::k], k


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 < 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def _lines(pieces: Sequence[str]) -> List[str]:
    """``pieces`` joined with " · " into lines of at most about :data:`_CHARS_PER_LINE` characters."""
    lines: List[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 3 + len(piece) <= _CHARS_PER_LINE:
            lines[-1] += " · " + piece
        else:
            lines.append(piece)
    return lines


class _Series:
    """One line of a panel: a run's steps of the loop, or one rank's (``rank``), in ms, and its ranges."""

    def __init__(self, steps, colour: str, rank: Optional[int] = None) -> None:
        self.steps, self.colour, self.rank = steps, colour, rank
        self.values = np.asarray(steps.durations_s, np.float64) * 1000
        self.ranges = _ranges(self.values)


class _Panel:
    """One step loop's panel: its legend lines, then the drawing (:meth:`draw`) at a given top.

    ``ranks``: in a multi-rank run, the loop's steps of each rank (``(rank, StepStats)``): one line per rank over
    the same step numbers (the ith step of every rank is the run's ith step), the warm-up and the marks the
    first rank's; else the run's steps are one line."""

    def __init__(self, steps, marks, colour: str, ranks: Sequence[tuple] = ()) -> None:
        self.steps, self.marks, self.colour = steps, marks, colour
        ranked = [(rank, stats) for rank, stats in ranks if len(stats.durations_s)]
        self.lines = ([_Series(stats, _COLOURS[(_COLOURS.index(colour) + n) % len(_COLOURS)], rank)
                       for n, (rank, stats) in enumerate(ranked)] if len(ranked) >= 2 else [_Series(steps, colour)])
        first = self.lines[0]
        self.values = first.values  # the warm-up, the first step and the x axis's numbers are the first line's
        self.all_values = np.concatenate([line.values for line in self.lines])
        self.ranges = first.ranges
        self.grouped = self.ranges[0].first != self.ranges[0].last
        self.first_step = max(1, int(getattr(steps, "first_step", 1) or 1))
        count = max(len(line.values) for line in self.lines)
        self.count = count
        self.warmup = min(int(getattr(first.steps, "warmup_steps", 0) or 0), len(self.values))
        median, p95 = steps.median_s * 1000, steps.p95_s * 1000
        self.steady = (getattr(steps, "steady_median_s", 0.0) or 0.0) * 1000 or median
        steady_p95 = (getattr(steps, "steady_p95_s", 0.0) or 0.0) * 1000 or p95
        self.p95 = p95
        # the y scale: up to the slowest step, unless some are far slower than the steady ones
        highest = float(self.all_values.max())
        limit = OFF_SCALE * max(steady_p95, self.steady)
        below = self.all_values[self.all_values <= limit] if highest > limit > 0 else self.all_values
        self.ticks = _nice_ticks(max(float(below.max()) if len(below) else highest, self.steady))
        self.top = self.ticks[-1] if self.ticks[-1] > 0 else 1.0
        self.off_scale = int(np.count_nonzero(self.all_values > self.top))
        starts = np.asarray(marks.epochs if marks else [], np.int64)
        # a line where an epoch starts after the panel's first step (at the first, the y axis is the boundary)
        self.epochs, self.epoch_every = _every(starts[starts > 0], MAX_EPOCH_MARKS)
        evals = np.asarray(marks.evals if marks else [], np.int64)
        during = np.asarray(marks.evals_during if marks else [], np.bool_)
        if len(during) != len(evals):
            during = np.zeros(len(evals), np.bool_)
        shown, self.eval_every = _every(np.arange(len(evals)), MAX_EVAL_MARKS)
        self.evals, self.evals_during = evals[shown], during[shown]
        self.epoch_count, self.eval_count = len(marks.epochs) if marks else 0, len(evals)

        last = self.first_step + count - 1
        numbers = f"{self.first_step:,} to {last:,}" if count > 1 else f"step {self.first_step:,}"
        kept = sum(len(line.values) for line in self.lines)
        if kept < steps.count:  # a trace limit: the statistics count every step, the durations stop there
            head = f"{steps.label}: the first {count:,} of {steps.count:,} steps ({numbers}): the trace stops there"
        else:
            head = f"{steps.label}: {count:,} step{'s' if count != 1 else ''}, {numbers}"
        if len(self.lines) > 1:
            head += f", on each of {len(self.lines)} ranks"
        warm = (f"warm-up {self.warmup:,} step{'s' if self.warmup != 1 else ''} (shaded)" if self.warmup
                else "no warm-up")
        stats = [f"median {_ms(median)} ms (steady {_ms(self.steady)} ms, dashed)", f"p95 {_ms(p95)} ms",
                 f"first step {_ms(self.values[0])} ms", warm]
        notes = []
        if len(self.lines) > 1:
            notes.append("one line per rank: " + ", ".join(f"rank {line.rank} {_COLOUR_NAMES[line.colour]}"
                                                         for line in self.lines)
                         + (f" (warm-up and marks: rank {first.rank}'s)" if self.warmup or marks else ""))
        notes.append("● the first step, and steps above the 95th percentile" if not self.grouped
                     else "● ranges whose slowest step is among the slowest 5 %")
        if self.grouped:
            notes.append(f"by ranges of {self.ranges[0].last + 1:,} steps: the line their median, the band their "
                         "minimum to maximum")
        if self.epoch_count:
            notes.append(f"| a new epoch ({self.epoch_count:,} epoch{'s' if self.epoch_count != 1 else ''}"
                         + (f"; every {_ordinal(self.epoch_every)} boundary drawn" if self.epoch_every > 1 else "")
                         + ")")
        if self.eval_count:
            notes.append(f"▼ evaluation after the step ({self.eval_count:,}"
                         + (f"; every {_ordinal(self.eval_every)} drawn" if self.eval_every > 1 else "") + ")")
        if marks is not None and (marks.partial or kept < steps.count):
            notes.append("epoch marks for the kept steps only")
        if self.off_scale:
            notes.append(f"○ on the top edge: {self.off_scale:,} step{'s' if self.off_scale != 1 else ''} "
                         f"above {self.top:g} ms" + (f", the slowest {_ms(highest)} ms" if self.off_scale > 1 else ""))
        self.legend = [head] + _lines(stats + notes)

    @property
    def height(self) -> float:
        return _LINE_H * len(self.legend) + 4 + _STRIP_H + _PLOT_H + _AXIS_H

    def draw(self, out: List[str], top: float, number: int) -> None:
        start = len(out)
        steps, colour, values = self.steps, self.colour, self.values
        count = self.count
        plot_w = _WIDTH - _LEFT - _RIGHT
        plot_top = top + _LINE_H * len(self.legend) + 4 + _STRIP_H
        bottom = plot_top + _PLOT_H

        def x(index: float) -> float:  # step ``index`` (0-based) in the middle of its slot
            return _LEFT + plot_w * (index + 0.5) / count

        def y(ms: float) -> float:
            return plot_top + _PLOT_H * (1 - min(ms, self.top) / self.top)

        def step(index: int) -> int:
            return self.first_step + index

        self.taken: List[tuple] = []  # (left, right) of the text in the strip above the plotting area
        for line_number, line in enumerate(self.legend):
            weight = ' font-weight="bold"' if line_number == 0 else ""
            fill = colour if line_number == 0 else "#333"
            out.append(f'<text class="legend" x="{_LEFT}" y="{top + _LINE_H * (line_number + 1) - 3:.1f}" '
                       f'fill="{fill}"{weight}>{escape(line)}</text>')
        out.append(f'<rect class="plot-area" data-label={quoteattr(steps.label)} x="{_LEFT}" y="{plot_top:.1f}" '
                   f'width="{plot_w}" height="{_PLOT_H}" fill="none" stroke="none"/>')
        if self.warmup:
            left, right = x(-0.5), max(x(self.warmup - 0.5), x(-0.5) + 2)
            seconds = float(np.sum(values[:self.warmup])) / 1000
            out.append(f'<rect class="warmup" x="{left:.1f}" y="{plot_top:.1f}" width="{right - left:.1f}" '
                       f'height="{_PLOT_H}" fill="#f2c744" fill-opacity="0.25" stroke="none">'
                       f'<title>warm-up: steps {step(0):,} to {step(self.warmup - 1):,} ({seconds:.3g} s)</title>'
                       '</rect>')
        for tick in self.ticks:
            out.append(f'<line x1="{_LEFT - 4}" y1="{y(tick):.1f}" x2="{_LEFT + plot_w}" y2="{y(tick):.1f}" '
                       'stroke="#ddd"/>')
            out.append(f'<text class="ytick" x="{_LEFT - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
        middle = plot_top + _PLOT_H / 2
        out.append(f'<text x="16" y="{middle:.1f}" text-anchor="middle" transform="rotate(-90 16 {middle:.1f})">'
                   "step time (ms)</text>")
        out.append(f'<line x1="{_LEFT}" y1="{bottom:.1f}" x2="{_LEFT + plot_w}" y2="{bottom:.1f}" stroke="black"/>')
        out.append(f'<line x1="{_LEFT}" y1="{plot_top:.1f}" x2="{_LEFT}" y2="{bottom:.1f}" stroke="black"/>')
        for index in self.epochs.tolist():
            at = x(index - 0.5)
            out.append(f'<line class="epoch" data-step="{step(index)}" x1="{at:.1f}" y1="{plot_top:.1f}" '
                       f'x2="{at:.1f}" y2="{bottom:.1f}" stroke="#777" stroke-width="0.8">'
                       f'<title>an epoch starts at step {step(index):,}</title></line>')
        for index, during in zip(self.evals.tolist(), self.evals_during.tolist()):
            at = x(index if during else index + 0.5)
            when = "during" if during else "after"
            self.taken.append((at - 4, at + 4))
            out.append(f'<path class="eval" data-step="{step(index)}" d="M{at - 4:.1f},{plot_top - 10:.1f} '
                       f'h8 l-4,8 z" fill="#555"><title>an evaluation ran {when} step {step(index):,}</title></path>')
        for line in self.lines:
            self._series(out, line, x, y, step)
        out.append(f'<line class="median" x1="{_LEFT}" y1="{y(self.steady):.1f}" x2="{_LEFT + plot_w}" '
                   f'y2="{y(self.steady):.1f}" stroke="{colour}" stroke-dasharray="5,4" stroke-width="1">'
                   f'<title>steady median {self.steady:.2f} ms</title></line>')
        if self.warmup:
            # in the strip above the plotting area, at the shading's right end (inside it when it is wide,
            # as the first steps' marks are at its left), clear of the evaluation marks and the off-scale times
            left, right = x(-0.5), max(x(self.warmup - 0.5), x(-0.5) + 2)
            width = 50  # of the text, at 11 px
            span = self._place([(right - 2 - width, right - 2), (right + 3, right + 3 + width)]
                               if right - left >= width + 10 else [(right + 3, right + 3 + width)])
            if span is not None:
                out.append(f'<text class="warmup-label" x="{span[0]:.1f}" y="{plot_top - 3:.1f}" fill="#9a7b00" '
                           'font-size="11">warm-up</text>')
        self._x_ticks(out, x, step, bottom)
        # the panel's elements stay children of the document (a reader finds the first series' line there),
        # each saying its panel
        out[start:] = [_PANEL_TAG.sub(rf'<\1 data-panel="{number}" ', element, count=1) for element in out[start:]]

    def _series(self, out: List[str], line: _Series, x, y, step) -> None:
        label, colour, ranges = self.steps.label, line.colour, line.ranges
        grouped = ranges[0].first != ranges[0].last
        if line.rank is not None:
            label = f"{label}, rank {line.rank}"
        rank = f' data-rank="{line.rank}"' if line.rank is not None else ""

        def mid(r: _Range) -> float:
            return x((r.first + r.last) / 2)

        if grouped:
            band = [f"{mid(r):.1f},{y(r.high):.1f}" for r in ranges] + \
                   [f"{mid(r):.1f},{y(r.low):.1f}" for r in reversed(ranges)]
            out.append(f'<polygon class="band"{rank} fill="{colour}" fill-opacity="0.2" stroke="none" '
                       f'points="{" ".join(band)}"><title>{escape(label)}: min to max of each range of '
                       f'{ranges[0].last + 1:,} steps</title></polygon>')
        points = " ".join(f"{mid(r):.1f},{y(r.median):.1f}" for r in ranges)
        out.append(f'<polyline class="steps"{rank} fill="none" stroke="{colour}" stroke-width="1.5" '
                   f'points="{points}"/>')
        # a range of many steps nearly always holds one above the 95th percentile: ranges are marked when their
        # maximum is also among the highest 5 % of the ranges' maxima (unlike most of the others)
        above = self.p95 if not grouped else max(self.p95, float(np.percentile([r.high for r in ranges], 95)))
        marked = sorted((r for r in ranges[1:] if r.high > above or r.high > self.top),
                        key=lambda r: r.high, reverse=True)[:MAX_MARKS]
        for r in sorted([ranges[0], *marked], key=lambda r: r.first):
            steps = f"step {step(r.first):,}" if not grouped else f"steps {step(r.first):,}-{step(r.last):,}, max"
            value = r.high if grouped else r.median
            off = value > self.top
            style = f'fill="white" stroke="{colour}" stroke-width="1.5"' if off else f'fill="{colour}"'
            out.append(f'<circle class="mark{" offscale" if off else ""}"{rank} data-step="{step(r.first)}" '
                       f'cx="{mid(r):.1f}" cy="{y(value):.1f}" r="3.5" {style}>'
                       f'<title>{escape(label)} {steps}: {value:.2f} ms{" (off the scale)" if off else ""}</title>'
                       '</circle>')
        # the slowest off-scale marks say their time (in the strip above the plotting area), where the text
        # does not run into other text there
        slowest = sorted((r for r in [ranges[0], *marked] if (r.high if grouped else r.median) > self.top),
                         key=lambda r: r.high, reverse=True)
        labelled = 0
        for r in slowest:
            if labelled == _OFF_SCALE_LABELS:
                break
            text = f"{_ms(r.high if grouped else r.median)} ms"
            width = 6.6 * len(text)  # at 11 px, about
            at = mid(r)
            span = self._place([(at + 8, at + 8 + width), (at - 8 - width, at - 8)])  # right of the mark, else left
            if span is None:
                continue
            labelled += 1
            out.append(f'<text class="offscale-label" x="{span[0]:.1f}" y="{y(self.top) - 3:.1f}" '
                       f'font-size="11" fill="{colour}">{text}</text>')

    def _place(self, spans: Sequence[tuple]) -> Optional[tuple]:
        """The first of ``spans`` (left, right) in the strip above the plotting area that is inside the panel and
        clear of the text and marks there; taken."""
        for left, right in spans:
            if left >= _LEFT - 30 and right <= _WIDTH - 4 and \
                    not any(left < other[1] + 5 and other[0] < right + 5 for other in self.taken):
                self.taken.append((left, right))
                return left, right
        return None

    def _x_ticks(self, out: List[str], x, step, bottom: float) -> None:
        count = self.count
        first, last = step(0), step(count - 1)
        spacing = 80  # px between labels, at least
        chosen: List[int] = []
        candidates = [first, last]
        if count > 2:
            stride = _nice_step(max((last - first) / 7, 1))
            candidates += list(range(int(math.ceil(first / stride) * stride), last + 1, int(stride)))
        for number in candidates:
            if first <= number <= last and all(abs(x(number - first) - x(c - first)) >= spacing for c in chosen):
                chosen.append(number)
        for number in sorted(chosen):
            at, text = x(number - first), f"{number:,}"
            half = 3.5 * len(text)  # about half the text's width
            anchor = "end" if at + half > _WIDTH - 2 else "start" if at - half < 2 else "middle"
            shift = {"end": 4, "start": -4, "middle": 0}[anchor]
            out.append(f'<line x1="{at:.1f}" y1="{bottom:.1f}" x2="{at:.1f}" y2="{bottom + 4:.1f}" stroke="black"/>')
            out.append(f'<text class="xtick" data-step="{number}" x="{at + shift:.1f}" y="{bottom + 17:.1f}" '
                       f'text-anchor="{anchor}">{text}</text>')


def step_time_svg(steps: Sequence, title: str, marks: Optional[Mapping[str, object]] = None,
                  ranks: Sequence = ()) -> str:
    """An SVG document with a panel per step loop plotting its step durations (ms) against the run's step
    number; ``marks``: per step label, its :class:`~..statistics.step_marks.StepMarks` (epoch starts, evaluations),
    over the steps of the panel's first line; ``ranks``: a multi-rank run's
    :class:`~..statistics.summary.RankStats`, a line per rank in each panel."""
    series = [s for s in steps if len(s.durations_s)]
    shown = series[:MAX_PANELS]

    def by_rank(label: str) -> List[tuple]:
        return [(rank.rank, stats) for rank in ranks for stats in rank.steps if stats.label == label]

    panels = [_Panel(s, (marks or {}).get(s.label), _COLOURS[n % len(_COLOURS)], by_rank(s.label))
              for n, s in enumerate(shown)]
    notes = []
    if len(series) > len(shown):
        hidden = len(series) - len(shown)
        notes.append(f"{hidden} more step loop{'s' if hidden != 1 else ''} in summary.json")
    body = sum(p.height + _GAP for p in panels) if panels else 80
    height = math.ceil(_TITLE_H + body + _FOOT_H * (1 + len(notes)))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{height}" fill="white"/>',
        f'<text class="title" x="{_WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
    ]
    top = float(_TITLE_H)
    for number, panel in enumerate(panels):
        panel.draw(out, top, number)
        top += panel.height + _GAP
    if not panels:
        out.append(f'<text class="note" x="{_WIDTH / 2}" y="{_TITLE_H + 40}" text-anchor="middle">'
                   'no step tasks were recorded</text>')
        top += 80
    else:
        out.append(f'<text x="{_LEFT + (_WIDTH - _LEFT - _RIGHT) / 2}" y="{top + 6:.1f}" text-anchor="middle">'
                   "step (the run's step number, in order of execution)</text>")
    for line, note in enumerate(notes):
        out.append(f'<text class="note" x="{_LEFT}" y="{top + 6 + _FOOT_H * (line + 1):.1f}">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
