"""``autoitt compare BASE NEW``: two profiles of a script compared, and whether the step time moved beyond noise.

In libcst's manner, small private modules re-exported here: :mod:`._noise` (the test: within a run, the
steady medians' distribution-free intervals; between runs, Student's t on repeats; and a threshold),
:mod:`._compare` (what moved, from the two sides' summaries: :func:`compare` gives a :class:`Comparison`,
whose :meth:`~Comparison.to_json` is ``--json``), :mod:`._render` (the terminal). The result folders are read
by :mod:`instrumenter.cli.comparing`.
"""

from ._compare import TOP_MOVERS, Change, Comparison, Mover, Run, Side, StepComparison, compare
from ._noise import (CONFIDENCE, MIN_STEPS, ONE_RUN_THRESHOLD, REPEATS_THRESHOLD, Interval, Medians, Verdict,
                     difference, median_interval)
from ._render import render, render_html

__all__ = ["CONFIDENCE", "MIN_STEPS", "ONE_RUN_THRESHOLD", "REPEATS_THRESHOLD", "TOP_MOVERS", "Change",
           "Comparison", "Interval", "Medians", "Mover", "Run", "Side", "StepComparison", "Verdict", "compare",
           "difference", "median_interval", "render", "render_html"]
