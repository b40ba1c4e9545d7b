"""The measurement settings every optimisation callback takes: its ``latency_*`` and
``eval_batches`` knobs (``conf/base/measure.yaml``), their defaults and ranges, checked in one
place for callers from plain Python too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from hpml.analysis.blocks import AUTO, CLOCKS
from hpml.analysis.compare import BUDGET_S, CI_WIDTH, MIN_RUN_TIME_S, ROUNDS, Plan
from hpml.errors import ConfigError, non_negative_int, positive_int
from hpml.ranges import Range

LATENCY_ROUNDS = ROUNDS
LATENCY_MIN_RUN_TIME_S = MIN_RUN_TIME_S
LATENCY_BUDGET_S = BUDGET_S
LATENCY_CI_WIDTH = CI_WIDTH
LATENCY_CLOCK = AUTO
# the ranges of the latency knobs, as each callback that measures declares them
RunTime = Annotated[float, Range(gt=0, note="seconds of calls per side and round")]
Budget = Annotated[float, Range(ge=0, note="seconds per batch size; 0: latency_rounds exactly")]
Width = Annotated[float, Range(gt=0, note="the speed-up interval's width over its median")]
Clock = Literal["auto", "wall", "thread_cpu"]


@dataclass(frozen=True)
class Settings:
    """How a variant is measured: latency at batch 1 and ``batch_size``, timed side by side in
    at least ``rounds`` rounds of about ``min_run_time_s`` seconds per variant, then until the
    speed-up's interval is at most ``ci_width`` of its median wide or ``budget_s`` seconds are
    spent, per batch size, on ``clock`` (:class:`hpml.analysis.compare.Plan`); quality on
    ``eval_batches`` validation batches (``None``: all of them)."""

    batch_size: int
    rounds: int = LATENCY_ROUNDS
    min_run_time_s: float = LATENCY_MIN_RUN_TIME_S
    eval_batches: int | None = None
    budget_s: float = LATENCY_BUDGET_S
    ci_width: float = LATENCY_CI_WIDTH
    clock: Clock = LATENCY_CLOCK

    @classmethod
    def checked(
        cls,
        latency_batch_size: int,
        latency_rounds: int,
        latency_min_run_time_s: float,
        eval_batches: int | None,
        latency_budget_s: float = LATENCY_BUDGET_S,
        latency_ci_width: float = LATENCY_CI_WIDTH,
        latency_clock: Clock = LATENCY_CLOCK,
    ) -> Settings:
        """Settings from a callback's config values, each refused in one line when invalid."""
        for key, value, hint in (
            ("latency_min_run_time_s", latency_min_run_time_s, RunTime),
            ("latency_budget_s", latency_budget_s, Budget),
            ("latency_ci_width", latency_ci_width, Width),
        ):
            (allowed,) = hint.__metadata__
            if not allowed.accepts(value):
                raise ConfigError(key, value, allowed.expected())
        if latency_clock not in CLOCKS:
            raise ConfigError("latency_clock", latency_clock, f"one of {', '.join(CLOCKS)}")
        return cls(
            positive_int("latency_batch_size", latency_batch_size),
            positive_int("latency_rounds", latency_rounds),
            float(latency_min_run_time_s),
            None if eval_batches is None else non_negative_int("eval_batches", eval_batches),
            float(latency_budget_s),
            float(latency_ci_width),
            latency_clock,
        )

    @property
    def plan(self) -> Plan:
        """How :mod:`hpml.analysis.compare` times one batch size."""
        return Plan(self.rounds, self.min_run_time_s, self.budget_s, self.ci_width, self.clock)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys((1, self.batch_size)))
