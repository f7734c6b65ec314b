"""``steps.svg``: step duration over the run, so warm-up and outliers stand out.

Plain SVG written by hand (numpy for the ranges): no plotting library in autoitt's dependencies.
One series per step loop; the median is drawn as a dashed line, points above
the 95th percentile are marked. A run of more than :data:`MAX_POINTS` steps
is drawn by step range: the median of each range as the line, its minimum to
maximum as a band, a mark at the maximum of ranges that reach above the 95th
percentile (the highest :data:`MAX_MARKS` of them), so the file stays small
whatever the run's length.
"""

from __future__ import annotations

import math
from typing import List, Sequence

import numpy as np
from xml.sax.saxutils import escape

_WIDTH, _HEIGHT = 720, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 40, 50
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
#: At most this many points per series (one per step, or per range of steps).
MAX_POINTS = 2000
#: At most this many marked points per series.
MAX_MARKS = 200


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


def _nice_ticks(top: float, count: int = 5) -> List[float]:
    """Round tick values (1, 2 or 5 times a power of ten) from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    exponent = math.floor(math.log10(raw))
    step = next(m * 10 ** exponent for m in (1, 2, 5, 10) if m * 10 ** exponent >= raw)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


def step_time_svg(steps: Sequence, title: str) -> str:
    """An SVG document plotting each step series' durations (ms) against step number."""
    series = [(s.label, np.asarray(s.durations_s, np.float64) * 1000, s.median_s * 1000, s.p95_s * 1000)
              for s in steps]
    longest = max((len(values) for _, values, _, _ in series), default=0)
    highest = max((float(values.max()) for _, values, _, _ in series if len(values)), default=1.0)
    ticks = _nice_ticks(highest)
    y_top = ticks[-1] if ticks[-1] > 0 else 1.0
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM

    def x(index: float) -> float:
        return _LEFT + (plot_w * index / max(longest - 1, 1))

    def y(ms: float) -> float:
        return _TOP + plot_h * (1 - ms / y_top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{_HEIGHT}" fill="white"/>',
        f'<text x="{_WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_LEFT + plot_w}" y2="{_TOP + plot_h}" stroke="black"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="black"/>',
        f'<text x="{_LEFT + plot_w / 2}" y="{_HEIGHT - 12}" text-anchor="middle">step (in order of execution)</text>',
        f'<text x="16" y="{_TOP + plot_h / 2}" text-anchor="middle" transform="rotate(-90 16 {_TOP + plot_h / 2})">'
        "step time (ms)</text>",
    ]
    for tick in ticks:
        out.append(f'<line x1="{_LEFT - 4}" y1="{y(tick):.1f}" x2="{_LEFT + plot_w}" y2="{y(tick):.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{_LEFT - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    if longest:
        for index in sorted({0, longest - 1, *range(0, longest, max(1, longest // 8))}):
            out.append(f'<text x="{x(index):.1f}" y="{_TOP + plot_h + 18}" text-anchor="middle">{index + 1}</text>')
    for number, (label, values, median, p95) in enumerate(series):
        colour = _COLOURS[number % len(_COLOURS)]
        ranges = _ranges(values)
        grouped = ranges[0].first != ranges[0].last

        def mid(r: _Range) -> float:
            return x((r.first + r.last) / 2)

        if grouped:
            band = [f"{mid(r):.1f},{y(r.high):.1f}" for r in ranges] + \
                   [f"{mid(r):.1f},{y(r.low):.1f}" for r in reversed(ranges)]
            out.append(f'<polygon fill="{colour}" fill-opacity="0.2" stroke="none" points="{" ".join(band)}">'
                       f'<title>{escape(label)}: min to max of each range of {ranges[0].last + 1} steps</title>'
                       '</polygon>')
        points = " ".join(f"{mid(r):.1f},{y(r.median):.1f}" for r in ranges)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        out.append(f'<line x1="{_LEFT}" y1="{y(median):.1f}" x2="{_LEFT + plot_w}" y2="{y(median):.1f}" '
                   f'stroke="{colour}" stroke-dasharray="5,4" stroke-width="1"/>')
        marked = sorted((r for r in ranges[1:] if r.high > p95), key=lambda r: r.high, reverse=True)[:MAX_MARKS]
        for r in sorted([ranges[0], *marked], key=lambda r: r.first):
            steps = f"step {r.first + 1}" if not grouped else f"steps {r.first + 1}-{r.last + 1}, max"
            value = r.high if grouped else r.median
            out.append(f'<circle cx="{mid(r):.1f}" cy="{y(value):.1f}" r="3.5" fill="{colour}">'
                       f'<title>{escape(label)} {steps}: {value:.2f} ms</title></circle>')
        out.append(f'<text x="{_LEFT + 10}" y="{_TOP + 14 + 16 * number}" fill="{colour}">'
                   f'{escape(label)}: median {median:.2f} ms (dashed), p95 {p95:.2f} ms, first {values[0]:.2f} ms'
                   + (f"; by ranges of {ranges[0].last + 1} steps" if grouped else "") + '</text>')
    if not series:
        out.append(f'<text x="{_WIDTH / 2}" y="{_HEIGHT / 2}" text-anchor="middle">no step tasks were recorded</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
