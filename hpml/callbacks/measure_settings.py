"""The measurement knobs every optimisation callback takes (``conf/base/measure.yaml``),
declared once: their ranges, :class:`Settings`, and the base class :class:`OptimizationStep`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from hpml.analysis.blocks import AUTO, CLOCKS
from hpml.analysis.compare import BUDGET_S, CI_WIDTH, MIN_RUN_TIME_S, ROUNDS, Plan
from hpml.callbacks.base import HpmlCallback
from hpml.errors import ConfigError, non_negative_int, one_of, positive_int
from hpml.ranges import Count, Range

# the ranges of the latency knobs, as each callback that measures declares them
RunTime = Annotated[float, Range(gt=0, note="seconds of calls per side and round")]
Budget = Annotated[float, Range(ge=0, note="seconds per batch size; 0: latency_rounds exactly")]
Width = Annotated[float, Range(gt=0, note="the speed-up interval's width over its median")]
Clock = Literal["auto", "wall", "thread_cpu"]
T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """How a variant is measured: latency at batch 1 and ``batch_size``, timed side by side
    until the speed-up's interval is narrow enough or the budget spent; quality on
    ``eval_batches`` validation batches (``None``: all of them)."""

    batch_size: int
    rounds: int = ROUNDS
    min_run_time_s: float = MIN_RUN_TIME_S
    eval_batches: int | None = None
    budget_s: float = BUDGET_S
    ci_width: float = CI_WIDTH
    clock: Clock = AUTO

    @property
    def plan(self) -> Plan:
        """How :mod:`hpml.analysis.compare` times one batch size."""
        return Plan(self.rounds, self.min_run_time_s, self.budget_s, self.ci_width, self.clock)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys((1, self.batch_size)))


def built(method: T | Callable[[], T], kind: type[T]) -> T:
    """A step's method: ``method`` itself, or what its option's ``_partial_`` ``method`` node
    builds, a refused knob named ``method.<knob>``."""
    if isinstance(method, kind):
        return method
    try:
        return method()
    except ConfigError as exc:
        raise exc.under("method") from exc


class OptimizationStep(HpmlCallback):
    """A callback that measures a model before and after it changes it; its ``__init__`` is the
    one declaration of the knobs, each refused in one line when invalid.

    Each declares what validation asks of it (a property where its method or knobs decide):
    ``replaces_net_during_fit`` (renaming the net's stages mid-fit), ``safe_under_ddp`` (the
    parameters DDP wrapped stay), ``needs_calibration_data``, ``moves_to_another_device``.
    Refusals name it by ``stage`` (its group) and ``knob``; ``under_ddp``: what DDP runs instead.

    Args:
        latency_batch_size: batch N of ``<stage>/latency_bN_ms`` (batch 1 is always timed).
        latency_rounds: rounds of side-by-side timing at least.
        latency_min_run_time_s: seconds of calls per side, round and batch size.
        latency_budget_s: seconds per batch size after which no round starts.
        latency_ci_width: the speed-up interval's width over its median that ends the rounds.
        latency_clock: ``auto``, ``wall`` or ``thread_cpu``.
        eval_batches: validation batches judged before and after (``None``: all of them).
    """

    stage: ClassVar[str]
    under_ddp: ClassVar[str]
    replaces_net_during_fit: bool = False
    safe_under_ddp: bool = True
    needs_calibration_data: bool = False
    moves_to_another_device: bool = False

    @property
    def knob(self) -> tuple[str, Any]:
        """The knob under ``stage`` and its value that say what this step does, for a refusal."""
        raise NotImplementedError

    def __init__(
        self,
        latency_batch_size: int = 64,
        latency_rounds: Count = ROUNDS,
        latency_min_run_time_s: RunTime = MIN_RUN_TIME_S,
        latency_budget_s: Budget = BUDGET_S,
        latency_ci_width: Width = CI_WIDTH,
        latency_clock: Clock = AUTO,
        eval_batches: int | None = 4,
    ) -> None:
        for key, value, hint in (
            ("latency_min_run_time_s", latency_min_run_time_s, RunTime),
            ("latency_budget_s", latency_budget_s, Budget),
            ("latency_ci_width", latency_ci_width, Width),
        ):
            (allowed,) = hint.__metadata__
            if not allowed.accepts(value):
                raise ConfigError(key, value, allowed.expected())
        one_of("latency_clock", latency_clock, CLOCKS)
        self.settings = Settings(
            positive_int("latency_batch_size", latency_batch_size),
            positive_int("latency_rounds", latency_rounds),
            float(latency_min_run_time_s),
            None if eval_batches is None else non_negative_int("eval_batches", eval_batches),
            float(latency_budget_s),
            float(latency_ci_width),
            latency_clock,
        )
