"""Side-by-side latency: variants of a model timed in the same window, and their speed-up.

A "before" timed at one moment and an "after" timed at another compare two loads, not two
models (a study once reported a 441x speed-up whose "before" ran under a neighbour's burst:
2026-11-25, commit 70b0a75).
Here every round runs each variant once, in rotating order (A B, B A, ...:
:func:`hpml.analysis.rounds.round_order`), so both sides share each stretch of load; a speed-up
is the median of the per-round ratios before / after, with the order-statistic interval of that
median (:func:`hpml.analysis.stats.median_ci`) and n = rounds.

Each variant's turn is one block of calls timed by ``torch.utils.benchmark.Timer`` (the run's
thread count: Timer's default is 1; accelerator sync; an untimed warm-up of its own before each
block). Not ``blocked_autorange``: it re-estimates its block size on every call, growing blocks
until the timer's overhead is below 0.01%, so on a 2-core CPU a 0.2 ms VAE ran 1,000-call blocks
and 0.4-0.55 s per turn at ``min_run_time=0.05`` (13 s for one before/after at two batch sizes;
this VM, 2026-11-25, commit 70b0a75).
Here the block size is set once per variant, in its first turn (which warms it up too), so that
a block lasts about ``min_run_time``: a turn costs that, plus Timer's warm-up (2 calls, or 1% of
the block), and at least one call of a model slower than ``min_run_time``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.benchmark import Timer

from hpml.analysis.rounds import round_order
from hpml.analysis.stats import Interval, iqr, median_ci, verdict
from hpml.tensors import first_tensor

# 9: the smallest n whose 95% order-statistic interval of the median leaves out the extreme
# rounds (n = 7 spans min to max: one preempted round beside a CPU burner widened VGG11's
# pruning speed-up to [1.92, 4.43] from a median of 2.69x; this VM, 2026-11-25, commit 23ef620)
ROUNDS = 9
# `make bench ARGS="--case side_by_side"` (2026-11-25, commit 23ef620), a VAE pruning job's cost:
# 1.24x at 7 x 0.02 s, 1.17x at 9 x 0.01 s, 1.13x at 9 x 0.007 s
MIN_RUN_TIME_S = 0.007
CALIBRATION_SHARE = 0.1  # a calibration block this share of min_run_time times one call well


@dataclass(frozen=True)
class Timing:
    """One variant: milliseconds per call, one value per round (the round's block mean)."""

    rounds_ms: tuple[float, ...]
    calls_per_round: int
    device: str = "cpu"

    @property
    def median_ms(self) -> float:
        return statistics.median(self.rounds_ms)

    @property
    def iqr_ms(self) -> float:
        return iqr(self.rounds_ms)

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


def _check(rounds: int, min_run_time: float) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} is invalid: expected a positive integer")
    if not min_run_time > 0:
        raise ValueError(f"min_run_time={min_run_time!r} is invalid: expected seconds > 0")


def _calls_per_block(timer: Timer, min_run_time: float) -> int:
    """Calls that take about ``min_run_time``: blocks of 1, 10, 100... calls until one lasts
    ``CALIBRATION_SHARE`` of it (each ``timeit`` warms up first), then scaled up."""
    number = 1
    while True:
        seconds = timer.timeit(number).mean * number
        if seconds >= CALIBRATION_SHARE * min_run_time or number >= 10**7:
            return max(1, math.ceil(number * min_run_time / max(seconds, 1e-9)))
        number *= 10


def time_side_by_side(
    calls: Mapping[str, Callable[[], object]],
    rounds: int = ROUNDS,
    min_run_time: float = MIN_RUN_TIME_S,
) -> dict[str, Timing]:
    """Time each of ``calls`` once per round, in rotating order, for ``rounds`` rounds.

    Each turn is one block of about ``min_run_time`` seconds (the block size is set in the
    variant's first turn); the value kept per round is the block's mean seconds per call, in ms.
    """
    _check(rounds, min_run_time)
    if not calls:
        raise ValueError("time_side_by_side needs at least one variant")
    threads = torch.get_num_threads()
    timers = {
        name: Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        for name, fn in calls.items()
    }
    numbers: dict[str, int] = {}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for index in range(rounds):
        for name in round_order(list(calls), index):
            if name not in numbers:
                numbers[name] = _calls_per_block(timers[name], min_run_time)
            times[name].append(timers[name].timeit(numbers[name]).mean * 1e3)
    return {name: Timing(tuple(times[name]), numbers[name]) for name in calls}


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


def _forward(model: nn.Module, example: Any) -> Callable[[], object]:
    args = example if isinstance(example, tuple) else (example,)
    return lambda: model(*args)


def _device(example: Any) -> str:
    tensor = first_tensor(example)
    return "cpu" if tensor is None else str(tensor.device)


def compare_forward(
    variants: Mapping[str, tuple[nn.Module, Any]],
    rounds: int = ROUNDS,
    min_run_time: float = MIN_RUN_TIME_S,
) -> dict[str, Timing]:
    """Forward latency of each ``name: (model, example)``, side by side: eval mode, under
    ``torch.inference_mode``, each on its example's device; ``example`` is a tensor or a tuple
    of inputs. Train/eval modes are restored after."""
    calls = {name: _forward(model, x) for name, (model, x) in variants.items()}
    with evaluating([model for model, _ in variants.values()]), torch.inference_mode():
        timings = time_side_by_side(calls, rounds, min_run_time)
    return {
        name: Timing(t.rounds_ms, t.calls_per_round, _device(variants[name][1]))
        for name, t in timings.items()
    }
