"""Side-by-side timing: a known injected delay recovered, and intervals that cover the truth."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

from hpml.analysis.compare import Timing, compare_forward, speedup, time_side_by_side
from hpml.analysis.stats import FASTER, SLOWER, WITHIN_NOISE


class Spinner(nn.Module):
    """A forward pass that spins for ``seconds`` of its thread's CPU time: known work, like a
    model's. Neighbours stretch its wall time as they would a model's, by the same factor on both
    sides of a round; a wall-clock spin or a sleep instead adds the scheduler's delays, the same
    milliseconds to a short call and a long one (a 4 ms spin measured 10 ms at load 4)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.norm = nn.BatchNorm1d(3)
        self.modes: list[bool] = []
        self.grad_enabled: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        self.grad_enabled.append(torch.is_grad_enabled())
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        return x


def test_an_injected_delay_twice_as_long_is_recovered_within_ten_percent() -> None:
    slow, fast = Spinner(0.004), Spinner(0.002)
    x = torch.zeros(1, 3)
    timings = compare_forward({"slow": (slow, x), "fast": (fast, x)}, rounds=15, min_run_time=0.02)
    ratio = speedup(timings["slow"].rounds_ms, timings["fast"].rounds_ms)
    assert ratio.interval.median == pytest.approx(2.0, rel=0.10)
    assert ratio.interval.n == 15 and len(ratio.ratios) == 15
    assert timings["fast"].median_ms >= 2.0  # ms per call, at least its CPU time
    assert timings["fast"].calls_per_round > 1  # a block of about min_run_time, not one call
    assert timings["slow"].device == "cpu"


def test_forward_passes_run_in_eval_mode_without_autograd_and_modes_come_back() -> None:
    net = Spinner(0.0)
    net.train()
    net.norm.eval()  # a frozen batch norm inside a training net stays frozen
    compare_forward({"net": (net, torch.zeros(2, 3))}, rounds=2, min_run_time=0.001)
    assert net.modes and not any(net.modes) and not any(net.grad_enabled)
    assert net.training and not net.norm.training


def test_every_variant_gets_one_value_per_round() -> None:
    calls: dict[str, int] = {"A": 0, "B": 0}

    def call(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    timings = time_side_by_side({n: call(n) for n in calls}, rounds=4, min_run_time=1e-4)
    assert [t.n for t in timings.values()] == [4, 4]
    assert all(calls[name] >= 4 * t.calls_per_round for name, t in timings.items())


def test_timing_summarises_its_rounds() -> None:
    t = Timing((1.0, 2.0, 3.0, 4.0, 100.0), calls_per_round=10)
    assert t.median_ms == 3.0 and t.iqr_ms == pytest.approx(2.0) and t.n == 5


def test_speedup_is_the_median_of_paired_ratios_with_a_verdict() -> None:
    before = [4.0, 8.0, 4.2, 3.9, 4.1, 40.0, 4.0]  # one burst hit round 6: both sides saw it
    after = [2.0, 4.0, 2.0, 2.0, 2.0, 20.0, 2.1]
    s = speedup(before, after)
    assert s.interval.median == pytest.approx(2.0)
    assert s.interval.low <= s.interval.median <= s.interval.high
    assert s.verdict == FASTER
    assert s.describe() == "2.00x [1.90, 2.10] (n=7, faster)"
    assert speedup(after, before).verdict == SLOWER
    assert speedup([1.0, 1.1, 0.9], [1.05, 1.0, 1.0]).verdict == WITHIN_NOISE
    with pytest.raises(ValueError, match="same positive number of rounds"):
        speedup([1.0, 2.0], [1.0])


@pytest.mark.parametrize("rounds", [7, 15])
def test_the_95_percent_interval_covers_the_true_ratio_at_least_90_percent_of_the_time(
    rounds: int,
) -> None:
    """Synthetic rounds: load drifts from round to round (shared by both sides of a round),
    each side adds its own skewed noise; the true speed-up is 1.7."""
    rng = np.random.default_rng(22)
    true, trials, covered = 1.7, 500, 0
    for _ in range(trials):
        load = rng.lognormal(0.0, 0.5, rounds)
        after = 2.0 * load * rng.lognormal(0.0, 0.15, rounds)
        before = true * 2.0 * load * rng.lognormal(0.0, 0.15, rounds)
        covered += speedup(list(before), list(after)).interval.contains(true)
    assert covered / trials >= 0.90


@pytest.mark.parametrize(
    "rounds,run_time,match",
    [(0, 0.01, "rounds=0"), (True, 0.01, "rounds=True"), (3, 0.0, "min_run_time=0.0")],
)
def test_bad_knobs_are_refused_in_one_line(rounds, run_time, match) -> None:
    with pytest.raises(ValueError, match=match):
        time_side_by_side({"a": lambda: None}, rounds=rounds, min_run_time=run_time)
