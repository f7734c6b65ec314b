"""Whether two sides' step times differ beyond noise, and the method, stated in the output too.

What is tested is a step loop's steady median (its steps after the warm-up, as ``steady_median_s``). Two
sources of noise are told apart:

- **within a run**, the steps themselves: for the median of ``n`` steps, the order statistics of ranks
  ``(n + 1)/2 ± z·√n/2`` bound a 99 % confidence interval whatever the distribution of step times (the
  binomial law of how many steps fall below the true median), read from the run's histogram of 1 % buckets
  (``StepStats.steady_histogram``) to within a bucket, widened outwards. With thousands of steps it is a few
  percent wide or less;
- **between runs**, what holds for a whole run: the machine's other work, its neighbours on a VM, where
  memory landed. On the VMs autoitt is developed on, two runs of one unchanged script differ by up to 20-30 %
  (the steady medians of 9 runs of ``tests/test_compare.py``'s script spread over 0.57-0.73 ms, idle and with
  both cores busy: a coefficient of variation of 8.5 %, so 12 % for the ratio of two; the script run without
  autoitt spreads as much); a quiet machine's differ by 1-3 %.

With one run a side, the between-run noise cannot be seen: the medians differ beyond noise when their
intervals are disjoint and they are more than a threshold apart (:data:`ONE_RUN_THRESHOLD`, 30 % by default,
from the figures above). With repeats (several runs a side, at least three in all), it is measured: the runs'
log medians are compared by Student's t test at 99 % (the pooled spread of each side's runs about its mean),
and the medians must be more than :data:`REPEATS_THRESHOLD` apart. Profile the two sides in turn (base, new,
base, new), so that a machine's drift does not fall on one side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

#: each run's median interval, and the t test between runs: a gate in CI fails an unchanged script 1 time in
#: 100 at most, where the method's assumptions hold
CONFIDENCE = 0.99
_Z = 2.5758293035489004
#: Student's t at 99.5 % (a two-sided 99 % test) for 1..30 degrees of freedom; beyond, the normal's
_T = (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
      2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750)
#: the least difference of medians called beyond noise, with one run a side (2.5 times the 12 % spread of the
#: ratio of two runs' medians measured here: 1 unchanged pair in 80 beyond it), and with repeats
ONE_RUN_THRESHOLD = 0.30
REPEATS_THRESHOLD = 0.02
#: fewer steady steps than this give no interval worth the name
MIN_STEPS = 8

#: a histogram as ``summary.json`` keeps it: (lower bound in seconds, count), ascending; each bucket spans
#: [lower, lower * ratio)
Histogram = Sequence[Tuple[float, int]]


@dataclass(frozen=True)
class Interval:
    """Where the median of a run's steady steps lies, at :data:`CONFIDENCE`."""

    low_s: float
    high_s: float
    steps: int


@dataclass(frozen=True)
class Medians:
    """One side's steady medians of a step loop, a run each, with each run's interval (None: too few steps,
    or a summary.json of an autoitt that did not keep the histogram)."""

    values_s: Tuple[float, ...]
    intervals: Tuple[Optional[Interval], ...]

    @property
    def center_s(self) -> float:
        """The side's median: the geometric mean of its runs' (the one run's, alone)."""
        return math.exp(sum(math.log(v) for v in self.values_s) / len(self.values_s))


@dataclass(frozen=True)
class Verdict:
    #: NEW against BASE: "slower", "faster" (beyond noise), "within noise", "unknown", or "inconclusive" (the
    #: conditions of the runs may explain the difference: :mod:`._conditions`)
    difference: str
    #: how it was decided, in words (the method and its figures)
    how: str


def median_interval(histogram: Histogram, ratio: float) -> Optional[Interval]:
    """The interval of the median of the steps in ``histogram`` (buckets ``ratio`` wide), or None with fewer
    than :data:`MIN_STEPS` steps."""
    n = sum(count for _, count in histogram)
    if n < MIN_STEPS:
        return None
    half_width = _Z * math.sqrt(n) / 2
    low_rank = max(1, math.floor((n + 1) / 2 - half_width))
    high_rank = min(n, math.ceil((n + 1) / 2 + half_width))
    return Interval(low_s=_at_rank(histogram, low_rank), high_s=_at_rank(histogram, high_rank) * ratio, steps=n)


def _at_rank(histogram: Histogram, rank: int) -> float:
    """The lower bound of the bucket holding the ``rank``-th smallest step (1-based)."""
    seen = 0
    for lower, count in histogram:
        seen += count
        if seen >= rank:
            return lower
    return histogram[-1][0]


def difference(base: Medians, new: Medians, threshold: Optional[float] = None) -> Verdict:
    """Whether NEW's steady median differs from BASE's beyond noise (the module's method). ``threshold``: the
    least difference, a fraction, instead of the default for the case (:data:`ONE_RUN_THRESHOLD`,
    :data:`REPEATS_THRESHOLD`)."""
    if not base.values_s or not new.values_s or min(base.values_s + new.values_s) <= 0:
        return Verdict("unknown", "a side has no steady median")
    moved = new.center_s / base.center_s - 1
    # the least difference alike both ways: 30 % slower, or as much faster (1 / 1.3: 23 %)
    apart = lambda least: abs(math.log1p(moved)) > math.log1p(least)  # noqa: E731
    runs = len(base.values_s) + len(new.values_s)
    if runs >= 3:
        least = REPEATS_THRESHOLD if threshold is None else threshold
        logs = [[math.log(v) for v in side.values_s] for side in (base, new)]
        means = [sum(side) / len(side) for side in logs]
        squares = sum((x - mean) ** 2 for side, mean in zip(logs, means) for x in side)
        freedom = runs - 2
        spread = math.sqrt(squares / freedom)
        t = _T[freedom - 1] if freedom <= len(_T) else _Z
        bound = t * spread * math.sqrt(1 / len(logs[0]) + 1 / len(logs[1]))
        beyond = abs(means[1] - means[0]) > bound and apart(least)
        how = (f"{len(logs[0])} run(s) against {len(logs[1])}: Student's t on the runs' log medians, "
               f"{CONFIDENCE:.0%}, differences within ±{math.expm1(bound):.1%} are noise; and at least {least:.0%}")
    else:
        least = ONE_RUN_THRESHOLD if threshold is None else threshold
        a, b = base.intervals[0], new.intervals[0]
        how = (f"one run a side: the medians' {CONFIDENCE:.0%} intervals disjoint and at least {least:.0%} apart "
               "(two runs of one unchanged script differ by up to 20-30 % on a VM: repeats measure it)")
        if a is None or b is None:
            return Verdict("unknown", how + "; a run has too few steady steps or no step histogram")
        beyond = (b.low_s > a.high_s or b.high_s < a.low_s) and apart(least)
    if not beyond:
        return Verdict("within noise", how)
    return Verdict("slower" if moved > 0 else "faster", how)
