"""The noise probe's arithmetic, its reading of real processes, and the rule that judges a run."""

from __future__ import annotations

import os
import time
from collections import namedtuple

import psutil
import pytest

from hpml.analysis.noise import (
    CpuReading,
    NoiseProbe,
    NoiseRule,
    NoiseShares,
    busy_seconds,
    judge,
    tree_cpu_seconds,
)
from hpml.errors import ConfigError
from tests.helpers import cpu_neighbour, spinning


def test_figures_are_shares_of_wall_time_times_cpus_summed_over_windows():
    probe = NoiseProbe(pids=[])
    probe.cpus = 2
    # window 1: 2 s; the machine busy 2.5 CPU-s, this run 1 CPU-s, 0.2 s stolen
    probe.add(CpuReading(0.0, 10.0, 1.0, 3.0), CpuReading(2.0, 12.5, 1.2, 4.0), 1.5)
    # window 2: 1 s; the machine busy 1 CPU-s, all of it this run's
    probe.add(CpuReading(5.0, 20.0, 2.0, 6.0), CpuReading(6.0, 21.0, 2.0, 7.0), 0.5)
    shares = probe.shares()
    assert (shares.wall_s, shares.cpus, shares.load_avg_1m_procs) == (3.0, 2, 1.5)
    assert shares.other_cpu_pct == pytest.approx(100 * 1.5 / 6)
    assert shares.steal_pct == pytest.approx(100 * 0.2 / 6)


def test_steal_is_none_where_the_kernel_reports_none_and_other_never_below_zero():
    probe = NoiseProbe(pids=[])
    probe.cpus = 4
    probe.add(CpuReading(0.0, 10.0, None, 3.0), CpuReading(1.0, 11.0, None, 4.02), 0.1)
    shares = probe.shares()
    assert shares.steal_pct is None
    assert shares.other_cpu_pct == 0.0  # tick counters of two files: own can read a hair more


def test_reading_errors_of_many_short_windows_cancel_and_never_pass_the_machine():
    """A window a few ticks long reads busy and own a tick apart either way: summed window by
    window, the ticks busy read ahead made a quiet run's other CPU 192% of the machine."""
    probe = NoiseProbe(pids=[])
    probe.cpus = 2
    for i in range(10):  # 5 ms each; busy reads one 10 ms tick ahead of own, then behind
        t, tick = i * 0.01, 0.01 if i % 2 == 0 else -0.01
        probe.add(CpuReading(t, 0.0, 0.0, 0.0), CpuReading(t + 0.005, 0.005 + tick, 0.0, 0.005), 0)
    assert probe.shares().other_cpu_pct == pytest.approx(0.0, abs=1e-9)
    probe.add(CpuReading(1.0, 0.0, 0.0, 0.0), CpuReading(1.001, 0.2, 0.0, 0.0), 0)
    assert probe.shares().other_cpu_pct == 100.0  # at most the whole machine


def test_no_figures_before_a_window_closed():
    probe = NoiseProbe()
    assert probe.shares() is None
    probe.open()
    assert probe.is_open and probe.shares() is None
    probe.close()
    assert not probe.is_open and probe.shares() is not None


def test_busy_time_leaves_out_idle_iowait_steal_and_guest():
    Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
    times = Times(10.0, 1.0, 2.0, 100.0, 5.0, 0.5, 0.25, 3.0, 4.0, 0.5)
    assert busy_seconds(times) == pytest.approx(10 + 1 + 2 + 0.5 + 0.25)


@pytest.mark.usefixtures("alone")
def test_a_childs_cpu_time_is_the_runs_own_alive_and_after_it_was_reaped():
    before = tree_cpu_seconds([os.getpid()])
    child = spinning()
    try:
        time.sleep(1.0)
        burnt = sum(psutil.Process(child.pid).cpu_times()[:2])
        alive = tree_cpu_seconds([os.getpid()]) - before
    finally:
        child.kill()
        child.wait()
    reaped = tree_cpu_seconds([os.getpid()]) - before
    assert burnt > 0.05  # it ran, even on a crowded machine
    assert alive >= burnt - 0.02
    assert reaped >= burnt - 0.02  # now in this process's children_user/system


@pytest.mark.usefixtures("alone")
def test_a_neighbours_cpu_time_counts_as_other_processes():
    probe = NoiseProbe()
    with cpu_neighbour() as pid:
        burner = psutil.Process(pid)
        start = sum(burner.cpu_times()[:2])
        probe.open()
        time.sleep(1.5)
        probe.close()
        burnt = sum(burner.cpu_times()[:2]) - start
    shares = probe.shares()
    other_s = shares.other_cpu_pct / 100 * shares.wall_s * shares.cpus
    assert burnt > 0.05  # it ran, even on a crowded machine
    assert other_s >= burnt - 0.05  # the neighbour's time, and whatever else ran


def test_judge_names_each_figure_and_its_limit():
    rule = NoiseRule(max_other_cpu_pct=25, max_steal_pct=5, max_step_time_cv_pct=30, min_steps=10)
    quiet = NoiseShares(10.0, 2, other_cpu_pct=3.0, steal_pct=0.5, load_avg_1m_procs=2.0)
    assert judge(quiet, 10.0, 50, rule) is None
    busy = NoiseShares(10.0, 2, other_cpu_pct=48.2, steal_pct=7.0, load_avg_1m_procs=3.0)
    assert judge(busy, 12.0, 50, rule) == (
        "other processes used 48% of the CPU during timed work (limit 25%); "
        "the hypervisor stole 7% of the CPU during timed work (limit 5%)"
    )
    assert judge(quiet, 41.0, 50, rule) == (
        "training step time varied by 41% (CV over 50 steps, limit 30%)"
    )
    assert judge(quiet, 41.0, 9, rule) is None  # too few steps to judge their spread
    assert judge(None, None, 0, rule) is None
    brief = NoiseShares(0.004, 2, other_cpu_pct=100.0, steal_pct=50.0, load_avg_1m_procs=1.0)
    assert judge(brief, 10.0, 50, rule) is None  # 4 ms: under a tick of the counters


@pytest.mark.parametrize("value", [-1, float("nan"), "high", True, 150])
def test_a_share_limit_must_be_a_percentage(value):
    with pytest.raises(ConfigError) as raised:
        NoiseRule(max_steal_pct=value)
    assert str(raised.value.under("callbacks.perf")) == (
        f"callbacks.perf.noise.max_steal_pct={value!r} is invalid: "
        "expected a finite number in [0, 100]"
    )
    NoiseRule(max_step_time_cv_pct=150)  # a spread, not a share: above 100% is possible
