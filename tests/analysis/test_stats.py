"""Intervals and verdicts of hpml.analysis.stats, against exact coverage and seeded simulations."""

from __future__ import annotations

import numpy as np
import pytest

from hpml.analysis.stats import (
    FASTER,
    SLOWER,
    WITHIN_NOISE,
    Interval,
    cv_pct,
    iqr,
    median_ci,
    ratio_ci,
    verdict,
)


def test_median_ci_ranks_follow_the_binomial() -> None:
    # n=7: [x(2), x(6)] covers 87.5% only, so 95% needs [min, max] (98.4%)
    seven = median_ci([5.0, 1.0, 7.0, 3.0, 2.0, 6.0, 4.0])
    assert (seven.median, seven.low, seven.high, seven.n) == (4.0, 1.0, 7.0, 7)
    assert seven.coverage == pytest.approx(1 - 2 / 2**7)
    # n=20: k=6 gives 95.9%, k=7 only 88.5%
    twenty = median_ci([float(v) for v in range(20)])
    assert (twenty.low, twenty.high) == (5.0, 14.0)
    assert twenty.coverage == pytest.approx(0.9586, abs=1e-4)
    # n=5 cannot reach 95%: [min, max] with its own coverage
    five = median_ci([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (five.low, five.high) == (1.0, 5.0)
    assert five.coverage == pytest.approx(1 - 2 / 2**5)


def test_median_ci_covers_the_true_median_in_a_seeded_simulation() -> None:
    rng = np.random.default_rng(7)
    true_ratio, hits, trials = 3.0, 0, 2000
    for _ in range(trials):
        # per-round ratios with heavy multiplicative noise around the true ratio
        rounds = true_ratio * np.exp(rng.standard_t(3, size=9) * 0.2)
        hits += median_ci(rounds.tolist()).contains(true_ratio)
    assert hits / trials >= 0.95 - 0.015  # exact interval: 98.0% coverage at n=9 (k=2)


def test_ratio_ci_of_two_groups_contains_the_true_ratio() -> None:
    rng = np.random.default_rng(11)
    hits, trials = 0, 300
    for _ in range(trials):
        a = 2.0 * np.exp(rng.normal(0, 0.1, size=8))
        b = 1.0 * np.exp(rng.normal(0, 0.1, size=8))
        hits += ratio_ci(a.tolist(), b.tolist(), seed=int(rng.integers(1 << 30))).contains(2.0)
    assert hits / trials >= 0.90


def test_ratio_ci_with_one_value_is_a_point_and_within_noise() -> None:
    one = ratio_ci([2.1], [1.0, 1.1])
    assert (one.median, one.low, one.high, one.n) == (2.0, 2.0, 2.0, 1)
    assert verdict(one) == WITHIN_NOISE


def test_verdicts() -> None:
    assert verdict(Interval(2.0, 1.5, 2.5, 7, 0.98)) == FASTER
    assert verdict(Interval(0.5, 0.4, 0.6, 7, 0.98)) == SLOWER
    assert verdict(Interval(1.1, 0.9, 1.3, 7, 0.98)) == WITHIN_NOISE
    assert verdict(Interval(2.0, 1.5, 2.5, 7, 0.98), noisy=True) == WITHIN_NOISE


def test_a_margin_calls_small_differences_within_noise() -> None:
    # an A/A of two VAE sweeps on this project's VM read 1.05x [1.04, 1.09] between them
    small_gain, small_loss = (
        Interval(1.05, 1.04, 1.09, 3, 0.75),
        Interval(0.97, 0.96, 0.99, 3, 0.75),
    )
    assert verdict(small_gain) == FASTER and verdict(small_loss) == SLOWER
    assert verdict(small_gain, margin=0.05) == WITHIN_NOISE
    assert verdict(small_loss, margin=0.05) == WITHIN_NOISE
    assert verdict(Interval(1.3, 1.06, 1.5, 3, 0.75), margin=0.05) == FASTER
    assert verdict(Interval(0.8, 0.7, 0.94, 3, 0.75), margin=0.05) == SLOWER


def test_spread() -> None:
    assert iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0)
    assert iqr([4.0]) == 0.0
    assert cv_pct([10.0, 10.0]) == 0.0
    assert cv_pct([9.0, 11.0]) == pytest.approx(100 * np.std([9, 11], ddof=1) / 10)
