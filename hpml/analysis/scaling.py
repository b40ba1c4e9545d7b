"""Batch-size scaling (Skyline-style): fit step time and memory against batch size, predict others.

Both are straight lines in the batch size ``B``: step time ``a + b B`` (a fixed cost per step,
compute per sample) and memory ``c + d B`` (weights, gradients and optimiser state; activations).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from hpml.errors import HpmlError


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> statistics.LinearRegression:
    """``intercept + slope * x``, fitted by least squares."""
    if len(set(xs)) < 2:
        raise HpmlError(f"scaling needs runs at two or more batch sizes, got {sorted(set(xs))}")
    return statistics.linear_regression(xs, ys)


@dataclass(frozen=True)
class Prediction:
    batch_size: int
    step_time_s: float
    throughput_samples_per_s: float
    memory_bytes: float
    fits: bool | None


@dataclass(frozen=True)
class ScalingModel:
    """Step time (seconds) and memory (bytes) as lines in the batch size."""

    step_time_s: statistics.LinearRegression
    memory_bytes: statistics.LinearRegression

    @classmethod
    def fit(
        cls,
        batch_sizes: Sequence[int],
        step_times_s: Sequence[float],
        memory_bytes: Sequence[float],
    ) -> ScalingModel:
        return cls(fit_line(batch_sizes, step_times_s), fit_line(batch_sizes, memory_bytes))

    def predict(self, batch_size: int, capacity_bytes: float | None = None) -> Prediction:
        step = self.step_time_s.intercept + self.step_time_s.slope * batch_size
        memory = self.memory_bytes.intercept + self.memory_bytes.slope * batch_size
        fits = None if capacity_bytes is None else memory <= capacity_bytes
        return Prediction(batch_size, step, batch_size / step, memory, fits)

    def largest_batch(self, capacity_bytes: float) -> int | None:
        """The largest batch whose predicted memory fits ``capacity_bytes`` (None if unbounded)."""
        if self.memory_bytes.slope <= 0:
            return None
        return max(
            0, math.floor((capacity_bytes - self.memory_bytes.intercept) / self.memory_bytes.slope)
        )
