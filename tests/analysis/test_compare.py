"""Side-by-side timing: a known injected delay recovered, intervals that cover the truth, the
thread's CPU clock beside the wall clock, and rounds that stop when the interval is narrow."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from torch import nn

from hpml.analysis.blocks import THREAD_CPU, WALL, clock_for
from hpml.analysis.compare import (
    BUDGET,
    FIXED,
    NARROW,
    Plan,
    Timing,
    compare_forward,
    speedup,
    time_side_by_side,
)
from hpml.analysis.stats import FASTER, SLOWER, WITHIN_NOISE
from hpml.errors import ConfigError


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
        self.inference_inputs: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        self.grad_enabled.append(torch.is_grad_enabled())
        self.inference_inputs.append(x.is_inference())
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        return x


def test_an_injected_delay_twice_as_long_is_recovered_within_ten_percent() -> None:
    slow, fast = Spinner(0.004), Spinner(0.002)
    x = torch.zeros(1, 3)
    plan = Plan(rounds=15, min_run_time_s=0.02, budget_s=0)
    timings = compare_forward({"slow": (slow, x), "fast": (fast, x)}, plan)
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
    compare_forward({"net": (net, torch.zeros(2, 3))}, Plan(rounds=2, min_run_time_s=0.001))
    assert net.modes and not any(net.modes) and not any(net.grad_enabled)
    assert all(net.inference_inputs)  # a plain example, timed as a test stage's batch
    assert net.training and not net.norm.training


def test_every_variant_gets_one_value_per_round() -> None:
    calls: dict[str, int] = {"A": 0, "B": 0}

    def call(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    plan = Plan(rounds=4, min_run_time_s=1e-4, budget_s=0)
    timings = time_side_by_side({n: call(n) for n in calls}, plan)
    assert [t.n for t in timings.values()] == [4, 4]
    assert {t.stopped for t in timings.values()} == {FIXED}  # no budget: exactly the rounds
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
    "knobs,match",
    [
        ({"rounds": 0}, "rounds=0"),
        ({"rounds": True}, "rounds=True"),
        ({"min_run_time_s": 0.0}, "min_run_time_s=0.0"),
        ({"budget_s": -1.0}, "budget_s=-1.0"),
        ({"budget_s": float("inf")}, "budget_s=inf"),
        ({"ci_width": 0}, "ci_width=0"),
        ({"clock": "cpu"}, "clock='cpu'"),
    ],
)
def test_bad_knobs_are_refused_in_one_line(knobs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        Plan(**knobs)
    with pytest.raises(ValueError, match="at least one variant"):
        time_side_by_side({})


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_cpu_time_leaves_out_a_sleep_that_wall_time_holds(one_thread) -> None:
    """A call that works 1 ms and sleeps 3 ms: the thread clock reads its work, the wall clock
    its work and its sleep, as it would a stretch in which a neighbour held the core."""

    def works_and_sleeps() -> None:
        spin(0.001)
        time.sleep(0.003)

    plan = Plan(rounds=3, min_run_time_s=0.004, budget_s=0)
    (timing,) = time_side_by_side({"call": works_and_sleeps}, plan).values()
    assert timing.clock == THREAD_CPU and timing.n == 3 and len(timing.wall_ms) == 3
    assert 1.0 <= timing.median_ms < 2.5  # ms of work per call: the sleep left out
    assert timing.wall_median_ms >= 4.0  # work and sleep
    walled = time_side_by_side({"call": works_and_sleeps}, Plan(3, 0.004, 0, clock=WALL))["call"]
    assert walled.clock == WALL and walled.median_ms >= 4.0 and walled.wall_ms == ()


def test_the_clock_is_the_threads_only_for_cpu_calls_on_one_thread(one_thread) -> None:
    assert clock_for("auto", ["cpu"]) == clock_for("thread_cpu", ["cpu"]) == THREAD_CPU
    assert clock_for("wall", ["cpu"]) == WALL
    assert clock_for("auto", ["cpu", "cuda:0"]) == WALL  # it would miss the GPU's kernels
    assert clock_for("thread_cpu", ["cuda:0"]) == WALL
    torch.set_num_threads(2)
    assert clock_for("auto", ["cpu"]) == WALL  # it would miss the other thread's work
    assert clock_for("thread_cpu", ["cpu"]) == THREAD_CPU  # it times on one thread instead
    seen: list[int] = []
    plan = Plan(rounds=2, min_run_time_s=1e-4, budget_s=0, clock="thread_cpu")
    (timing,) = time_side_by_side(
        {"a": lambda: seen.append(torch.get_num_threads())}, plan
    ).values()
    assert timing.clock == THREAD_CPU and set(seen) == {1} and torch.get_num_threads() == 2


def test_work_on_another_thread_falls_back_to_the_wall_clock(one_thread, caplog) -> None:
    """A call whose work another thread of the process does (as a compiled graph's own OpenMP
    team would): the thread clock would read nothing, so the wall clock is used, and said."""
    with ThreadPoolExecutor(1) as pool:
        plan = Plan(rounds=3, min_run_time_s=0.004, budget_s=0)
        timings = time_side_by_side({"elsewhere": lambda: pool.submit(spin, 0.002).result()}, plan)
    (timing,) = timings.values()
    assert timing.clock == WALL and timing.median_ms >= 2.0
    assert "timed on wall time instead" in caplog.text


def test_rounds_stop_at_the_least_once_the_interval_is_narrow(one_thread) -> None:
    """Two sides of known work, 2 ms against 1 ms of thread CPU time: a narrow interval from
    the first 6 rounds on, so no round past the first whose interval is narrow (a round
    disturbed by another process may delay that one), far short of the budget."""
    plan = Plan(rounds=6, min_run_time_s=0.002, budget_s=20.0, ci_width=0.2)
    timings = time_side_by_side({"slow": lambda: spin(0.002), "fast": lambda: spin(0.001)}, plan)
    assert {t.stopped for t in timings.values()} == {NARROW}
    slow, fast = timings["slow"].rounds_ms, timings["fast"].rounds_ms
    ratio = speedup(slow, fast)
    assert ratio.narrow_share <= 0.2 and ratio.interval.median == pytest.approx(2.0, rel=0.1)
    n = ratio.interval.n
    assert n == 6 or (n < 20 and speedup(slow[: n - 1], fast[: n - 1]).narrow_share > 0.2)


def test_rounds_go_on_until_the_budget_while_the_interval_is_wide(one_thread) -> None:
    """The same known work with a width no timing reaches: rounds past the least, until the
    budget is spent on them, and no round begun after it. Read from the timings' own blocks
    (ms per call x calls), not from a clock around the call, which a loaded machine stretches."""
    plan = Plan(rounds=6, min_run_time_s=0.002, budget_s=0.3, ci_width=1e-9)
    timings = time_side_by_side({"slow": lambda: spin(0.002), "fast": lambda: spin(0.001)}, plan)
    assert {t.stopped for t in timings.values()} == {BUDGET}
    assert timings["slow"].n == timings["fast"].n > 6

    def blocks_s(rounds: slice) -> float:
        return (
            sum(
                sum((t.wall_ms or t.rounds_ms)[rounds]) * t.calls_per_round
                for t in timings.values()
            )
            / 1e3
        )

    # every round but the last began inside the budget; the rounds spent most of it (the rest:
    # sizing each variant's block before its first round)
    assert blocks_s(slice(0, -1)) < plan.budget_s
    assert blocks_s(slice(None)) >= plan.budget_s / 2


def test_a_model_without_parameters_given_no_tensor_runs_on_the_cpu() -> None:
    from hpml.analysis.compare import example_device

    assert example_device(torch.nn.Identity(), ()) == torch.device("cpu")
    assert example_device(torch.nn.Linear(2, 2).to("meta"), [3]) == torch.device("meta")
