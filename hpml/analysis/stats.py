"""Spread, confidence intervals and verdicts: what turns timings into a finding.

Non-parametric throughout (Hoefler & Belli, SC'15): timings on a shared machine are skewed and
heavy-tailed, so a finding is a median with a distribution-free interval.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

CONFIDENCE = 0.95  # asked of every interval here
RESAMPLES = 2000  # of the bootstrap of ratio_ci
FASTER, SLOWER, WITHIN_NOISE = "faster", "slower", "within noise"
VERDICTS = (FASTER, SLOWER, WITHIN_NOISE)


@dataclass(frozen=True)
class Interval:
    """A median with its confidence interval; ``coverage`` is the interval's own (>= asked for
    where the sample allows, less with fewer than 6 values)."""

    median: float
    low: float
    high: float
    n: int
    coverage: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def iqr(values: Sequence[float]) -> float:
    """Inter-quartile range (inclusive quartiles, as ``numpy.percentile``'s default); 0 for one."""
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def cv_pct(values: Sequence[float]) -> float:
    """Coefficient of variation, percent: standard deviation over mean; 0 for one value."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values) / mean if mean else math.inf


def median_ci(values: Sequence[float]) -> Interval:
    """The median of ``values`` and its order-statistic interval [x_(k), x_(n-k+1)], ``k`` the
    largest rank still covering ``CONFIDENCE``; where even [min, max] covers less, [min, max].
    """
    if not values:
        raise ValueError("median_ci needs at least one value")
    ordered = sorted(values)
    n = len(ordered)
    best = _rank(n)
    return Interval(
        statistics.median(ordered), ordered[best - 1], ordered[n - best], n, _coverage(n, best)
    )


@functools.cache
def _rank(n: int) -> int:
    """The ``k`` of :func:`median_ci` for ``n`` values (1 where none reaches ``CONFIDENCE``)."""
    best = 1
    for k in range(1, n // 2 + 1):
        if _coverage(n, k) < CONFIDENCE:
            break
        best = k
    return best


@functools.cache
def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n-k+1)) for n draws of a continuous distribution."""
    return float(binom.cdf(n - k, n, 0.5) - binom.cdf(k - 1, n, 0.5))


def ratio_ci(numerator: Sequence[float], denominator: Sequence[float], seed: int = 0) -> Interval:
    """median(numerator) / median(denominator) with a seeded percentile-bootstrap interval, for
    two independent groups; with one value on either side the point, ``coverage`` 0."""
    if not numerator or not denominator:
        raise ValueError("ratio_ci needs values on both sides")
    point = statistics.median(numerator) / statistics.median(denominator)
    n = min(len(numerator), len(denominator))
    if n < 2:
        return Interval(point, point, point, n, 0.0)
    rng = np.random.default_rng(seed)
    a, b = np.asarray(numerator, float), np.asarray(denominator, float)
    ra = np.median(rng.choice(a, (RESAMPLES, a.size)), axis=1)
    rb = np.median(rng.choice(b, (RESAMPLES, b.size)), axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(ra / rb, [tail, 100 - tail])
    return Interval(point, float(low), float(high), n, CONFIDENCE)


def verdict(interval: Interval, noisy: bool = False, margin: float = 0.0) -> str:
    """``faster`` when the whole interval of a speed-up (before / after) lies above
    ``1 + margin``, ``slower`` when below ``1 - margin``, else (or on fewer than two values, or
    ``noisy``) ``within noise``.

    Args:
        margin: the smallest difference called one: 0 inside a run, where both sides share every
            round; above 0 between groups run at different times (as asv's ``factor``).
    """
    if noisy or interval.n < 2:
        return WITHIN_NOISE
    if interval.low > 1.0 + margin:
        return FASTER
    if interval.high < 1.0 - margin:
        return SLOWER
    return WITHIN_NOISE
