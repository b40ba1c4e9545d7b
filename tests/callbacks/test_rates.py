"""hpml.callbacks.rates: each cycle's rates by Lightning's Throughput, their median and IQR."""

from __future__ import annotations

import statistics

import pytest
import torch

from hpml.analysis import timing
from hpml.analysis.stats import iqr
from hpml.callbacks.rates import cycle_rates

SAMPLES = [10, 10, 12, 10, 8]
CYCLES = [1.5, 2.5, 4.0, 5.0, 0.5]  # seconds: a stalled cycle and a quick one among them
RATES = [n / cycle for n, cycle in zip(SAMPLES, CYCLES, strict=True)]


def test_samples_per_s_is_the_median_of_each_cycles_rate_with_its_iqr() -> None:
    rates = cycle_rates(SAMPLES, CYCLES)
    assert rates.samples_per_s == pytest.approx(statistics.median(RATES), rel=1e-12)
    assert rates.samples_iqr_per_s == pytest.approx(iqr(RATES), rel=1e-12)
    assert rates.samples_per_s != pytest.approx(sum(SAMPLES) / sum(CYCLES))  # not the window's
    assert rates.flops_per_s is None and rates.mfu_pct == {}


def test_flops_per_s_and_mfu_are_the_flops_per_sample_times_the_median_rate() -> None:
    peaks = {"table": 200.0, "measured": 50.0}
    rates = cycle_rates(SAMPLES, CYCLES, flops_per_sample=3.0, peaks=peaks)
    median = statistics.median(RATES)
    assert rates.samples_per_s == pytest.approx(median, rel=1e-12)
    assert rates.flops_per_s == pytest.approx(3.0 * median, rel=1e-12)
    assert rates.mfu_pct == pytest.approx({k: 100 * 3.0 * median / p for k, p in peaks.items()})


def test_no_mfu_without_a_flop_count_and_no_rates_without_cycles() -> None:
    assert cycle_rates(SAMPLES, CYCLES, peaks={"table": 1.0}).mfu_pct == {}
    assert cycle_rates([], []) is None


def test_a_step_timers_cycles_give_its_own_throughput(monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    timer = timing.StepTimer(torch.device("cpu"), warmup_steps=1)
    for wait, step, n in ((5.0, 9.0, 4), (0.5, 1.0, 4), (1.0, 2.0, 3), (0.2, 4.0, 4)):
        clock[0] += wait
        timer.begin()
        clock[0] += step
        timer.end(n)
    stats = timer.stats()
    rates = cycle_rates(timer.samples[timer.warmup :], timer.cycle_seconds())
    assert rates.samples_per_s == pytest.approx(stats.throughput_samples_per_s, rel=1e-12)
    assert rates.samples_iqr_per_s == pytest.approx(stats.throughput_iqr_samples_per_s, rel=1e-12)
