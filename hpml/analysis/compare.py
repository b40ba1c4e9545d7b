"""Side-by-side latency: variants of a model timed in the same window, and their speed-up.

Every round runs each variant once, in rotating order (:mod:`hpml.analysis.rounds`), so both
sides share each stretch of load; a speed-up is the median of the per-round ratios before /
after, with its order-statistic interval (:func:`hpml.analysis.stats.median_ci`). A turn is one
block of calls (:mod:`hpml.analysis.blocks`) sized once, in the variant's first turn. Rounds
(:class:`Plan`): at least ``rounds``, then more until every speed-up's 95% interval is at most
``ci_width`` of its median wide, or ``budget_s`` is spent; stopping on the width, never on where
the interval lies, does not steer the verdict.
Defaults: docs/metrics.md#figures-behind-the-timing-defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hpml.analysis.blocks import (
    AUTO,
    CLOCKS,
    MISSED_SHARE,
    THREAD_CPU,
    WALL,
    calls_per_block,
    clock_for,
    synchronizer,
    threads_for,
    time_block,
)
from hpml.analysis.rounds import round_order
from hpml.analysis.stats import CONFIDENCE, Interval, iqr, median_ci, verdict
from hpml.errors import ConfigError
from hpml.ranges import Count, NonNegative, Positive, refuse_out_of_range
from hpml.tensors import as_args, as_inference, first_tensor

log = logging.getLogger(__name__)

# 9: the smallest n whose 95% order-statistic interval of the median leaves out the extreme
# rounds (n = 7 spans min to max: one preempted round decides it)
ROUNDS = 9
# short blocks keep side by side cheap for a job (`make bench ARGS="--case side_by_side"`)
MIN_RUN_TIME_S = 0.007
BUDGET_S = 10.0  # seconds per timing (each batch size) after which no further round starts
CI_WIDTH = 0.2  # an interval this share of its median wide is narrow
# why a timing stopped: its interval was narrow, its budget spent, or its rounds fixed (budget 0)
NARROW, BUDGET, FIXED = "narrow", "budget", "rounds"


@dataclass(frozen=True)
class Plan:
    """How long to time (module docstring).

    Args:
        min_run_time_s: about how long one block of a variant's calls lasts.
        budget_s: seconds after which no further round starts (0: exactly ``rounds``).
        clock: ``auto``, ``wall`` or ``thread_cpu`` (:mod:`hpml.analysis.blocks`).
    """

    rounds: Count = ROUNDS
    min_run_time_s: Positive = MIN_RUN_TIME_S
    budget_s: NonNegative = BUDGET_S
    ci_width: Positive = CI_WIDTH
    clock: str = AUTO

    def __post_init__(self) -> None:
        refuse_out_of_range(self, ConfigError)
        if self.clock not in CLOCKS:
            raise ConfigError("clock", self.clock, f"one of {', '.join(CLOCKS)}")


PLAN = Plan()  # the defaults, as conf/base/measure.yaml sets them


@dataclass(frozen=True)
class Timing:
    """One variant: milliseconds per call, one value per round (the round's block mean) on
    ``clock``; ``wall_ms`` the same blocks on the wall clock (empty: ``rounds_ms`` is wall);
    ``stopped``: why the rounds ended (``narrow``, ``budget`` or ``rounds``)."""

    rounds_ms: tuple[float, ...]
    calls_per_round: int
    device: str = "cpu"
    clock: str = WALL
    wall_ms: tuple[float, ...] = ()
    stopped: str = FIXED

    @property
    def median_ms(self) -> float:
        return statistics.median(self.rounds_ms)

    @property
    def iqr_ms(self) -> float:
        return iqr(self.rounds_ms)

    @property
    def wall_median_ms(self) -> float:
        return statistics.median(self.wall_ms or self.rounds_ms)

    @property
    def wall_iqr_ms(self) -> float:
        return iqr(self.wall_ms or self.rounds_ms)

    @property
    def n(self) -> int:
        return len(self.rounds_ms)


@dataclass(frozen=True)
class Speedup:
    """Before / after per round (> 1: the after side is faster), and the median's interval."""

    ratios: tuple[float, ...]
    interval: Interval

    @property
    def verdict(self) -> str:
        return verdict(self.interval)

    @property
    def narrow_share(self) -> float:
        """The interval's width over its median: at most ``ci_width`` is narrow."""
        i = self.interval
        return (i.high - i.low) / abs(i.median) if i.median else float("inf")

    def describe(self) -> str:
        """``2.91x [2.70, 3.10] (n=7, faster)``."""
        i = self.interval
        return f"{i.median:.2f}x [{i.low:.2f}, {i.high:.2f}] (n={i.n}, {self.verdict})"


def speedup(before_ms: Sequence[float], after_ms: Sequence[float]) -> Speedup:
    """Per-round ratios ``before / after`` (paired: round i of each side ran back to back)."""
    if not before_ms or len(before_ms) != len(after_ms):
        raise ValueError(
            f"speedup needs the same positive number of rounds on both sides, "
            f"got {len(before_ms)} and {len(after_ms)}"
        )
    ratios = tuple(b / a for b, a in zip(before_ms, after_ms, strict=True))
    return Speedup(ratios, median_ci(ratios))


def narrow(times: Mapping[str, Sequence[float]], ci_width: float) -> bool:
    """Whether every variant's speed-up against the first has its 95% interval (not a
    wider [min, max] of too few rounds) at most ``ci_width`` of its median wide."""
    first, *others = times.values()
    for other in others:
        found = speedup(first, other)
        if found.interval.coverage < CONFIDENCE or found.narrow_share > ci_width:
            return False
    return True


def _stopped(plan: Plan, times: Mapping[str, Sequence[float]], seconds: float) -> str | None:
    """Why to start no further round after ``seconds`` of timing, or None to go on."""
    if len(next(iter(times.values()))) < plan.rounds:
        return None
    if plan.budget_s == 0 or len(times) < 2:
        return FIXED
    if narrow(times, plan.ci_width):
        return NARROW
    return BUDGET if seconds >= plan.budget_s else None


def time_side_by_side(
    calls: Mapping[str, Callable[[], object]],
    plan: Plan = PLAN,
    devices: Collection[str] = ("cpu",),
) -> dict[str, Timing]:
    """Time each of ``calls`` once per round, in rotating order, for the rounds ``plan`` asks:
    per round, the block's mean ms per call. ``devices``: where the calls run (the clock, and
    what a block waits for)."""
    if not calls:
        raise ValueError("time_side_by_side needs at least one variant")
    clock = clock_for(plan.clock, devices)
    sync = synchronizer(devices)
    start = time.perf_counter()
    numbers: dict[str, int] = {}
    times: dict[str, list[float]] = {name: [] for name in calls}
    walls: dict[str, list[float]] = {name: [] for name in calls}
    # CPU seconds per variant, (thread, process): whether other threads ran part of its calls
    spent = {name: [0.0, 0.0] for name in calls}
    stopped = None
    index = 0
    with threads_for(clock):
        while stopped is None:
            for name in round_order(list(calls), index):
                if name not in numbers:
                    numbers[name] = calls_per_block(calls[name], plan.min_run_time_s, clock, sync)
                wall, cpu, process = time_block(calls[name], numbers[name], sync)
                times[name].append((wall if clock == WALL else cpu) * 1e3)
                walls[name].append(wall * 1e3)
                spent[name][0] += cpu * numbers[name]
                spent[name][1] += process * numbers[name]
            index += 1
            stopped = _stopped(plan, times, time.perf_counter() - start)
    missed = max(process / max(thread, 1e-9) - 1 for thread, process in spent.values())
    if clock == THREAD_CPU and missed > MISSED_SHARE:
        log.warning(
            f"side by side: the process used {missed:.0%} more CPU time than the timing thread "
            "(other threads ran part of the calls): timed on wall time instead"
        )
        clock, times = WALL, walls
    return {
        name: Timing(
            tuple(times[name]),
            numbers[name],
            clock=clock,
            wall_ms=() if clock == WALL else tuple(walls[name]),
            stopped=stopped,
        )
        for name in calls
    }


@contextmanager
def evaluating(models: Sequence[nn.Module]) -> Iterator[None]:
    """Every module of ``models`` in eval mode inside the block, each back in its own mode
    after (a frozen batch norm in a training net stays in eval)."""
    modes = {m: m.training for model in models for m in model.modules()}
    for model in models:
        model.eval()
    try:
        yield
    finally:
        for module, training in modes.items():
            module.training = training


def forward_call(model: nn.Module, example: Any) -> Callable[[], object]:
    """``model`` called on ``example``: a tensor, or a tuple of inputs."""
    args = as_args(example)
    return lambda: model(*args)


def example_device(model: nn.Module, example: Any) -> torch.device:
    """Where ``model(example)`` runs: its first input tensor's device, else its parameters',
    else the CPU."""
    first = first_tensor(example)
    if first is not None:
        return first.device
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def compare_forward(
    variants: Mapping[str, tuple[nn.Module, Any]], plan: Plan = PLAN
) -> dict[str, Timing]:
    """Forward latency of each ``name: (model, example)`` (a tensor or a tuple of inputs), side
    by side as ``plan`` asks, in eval mode under ``torch.inference_mode``, on inference tensors
    (copied once, before timing: a compiled variant would copy a plain one at every call, to
    run the graph it compiled for a test stage's, :func:`hpml.tensors.as_inference`)."""
    devices = {name: str(example_device(model, x)) for name, (model, x) in variants.items()}
    with evaluating([model for model, _ in variants.values()]), torch.inference_mode():
        calls = {
            name: forward_call(model, as_inference(as_args(x)))
            for name, (model, x) in variants.items()
        }
        timings = time_side_by_side(calls, plan, set(devices.values()))
    return {name: dataclasses.replace(t, device=devices[name]) for name, t in timings.items()}
