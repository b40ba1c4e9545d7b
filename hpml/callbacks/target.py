"""Time to a target quality, MLPerf style: time and epochs until a validation metric meets it."""

from __future__ import annotations

import logging
from typing import Annotated, Any, ClassVar, Literal

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from hpml.analysis.timing import synchronized_now
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_metrics, resuming, set_tags
from hpml.errors import ConfigError
from hpml.names import COUNT, TARGET_MET_TAG, TARGET_TAG, S, member_named, member_prefix, metric
from hpml.ranges import Range

log = logging.getLogger(__name__)

Mode = Literal["max", "min"]
KEY = "callbacks.target"  # where the knobs live, for errors raised after the config was built


def infer_mode(name: str) -> Mode:
    """``max`` for accuracy-like names (ending in ``acc``), else ``min`` (losses): the rule the
    Optuna sweeper's ``direction: null`` follows, so one metric reads the same way everywhere."""
    return "max" if name.rsplit("/", 1)[-1].endswith("acc") else "min"


class TimeToTarget(HpmlCallback):
    """``train/time_to_target_s`` and ``train/epochs_to_target_count``, once, when met.

    The clock runs from ``on_train_start`` to the end of the first validation whose ``metric``
    meets ``value``, everything between counting, as in MLPerf's time to train. Tags
    ``hpml.target`` and ``hpml.target.met``; ``stop=true`` ends training after that epoch. Rank
    zero's metric decides under DDP; a resumed fit measures nothing (its clock would miss the time
    before the interruption).
    """

    in_array: ClassVar[InArray] = InArray.PER_MEMBER

    def __init__(
        self,
        metric: str | None = None,
        value: Annotated[float | None, Range(null="no target", note="the metric's target")] = None,
        mode: Mode | None = None,
        stop: bool = False,
    ) -> None:
        if metric is None and value is not None:
            raise ConfigError("metric", None, f"a validation metric (val/acc) for value={value}")
        if metric is not None and (value is None or isinstance(value, bool)):
            raise ConfigError("value", value, f"a number, the target for metric={metric}")
        if mode not in (None, "max", "min"):
            raise ConfigError("mode", mode, "max, min or null (max for names ending in acc)")
        self.metric, self.value, self.stop = metric, value, stop
        self.mode: Mode | None = mode or (infer_mode(metric) if metric else None)
        self.start: float | None = None
        self.met = False

    def for_members(self, size: int) -> list[L.Callback]:
        """One :class:`MemberTimeToTarget` per member of an array of ``size``, with these
        knobs (none while ``metric`` is null: there is nothing to time)."""
        if self.metric is None:
            return []
        knobs = {"metric": self.metric, "value": self.value, "mode": self.mode, "stop": self.stop}
        return [MemberTimeToTarget(member, **knobs) for member in range(size)]

    @property
    def description(self) -> str:
        return f"{self.metric} {'>=' if self.mode == 'max' else '<='} {self.value}"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.metric is None or resuming(trainer):
            return
        self.start = synchronized_now(pl_module.device)
        self._tag(trainer, {TARGET_TAG: self.description})

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (
            self.start is None
            or self.met
            or trainer.sanity_checking
            or trainer.state.fn != TrainerFn.FITTING
        ):
            return
        now = synchronized_now(pl_module.device)
        # every rank reads its metric (a missing one fails them all alike); rank zero's decides
        if not trainer.strategy.broadcast(self._reached(trainer), src=0):
            return
        self.met = True
        epochs = trainer.current_epoch + 1
        self._log(
            trainer,
            {
                metric("train", "time_to_target", S): now - self.start,
                metric("train", "epochs_to_target", COUNT): float(epochs),
            },
        )
        self._tag(trainer, {TARGET_MET_TAG: "true"})
        log.info(
            "%starget %s met at epoch %d, %.1f s after training started%s",
            self.whose,
            self.description,
            epochs,
            now - self.start,
            ": stopping" if self.stop else "",
        )
        if self.stop:
            self._stop(trainer, pl_module)

    # what a fused array's member overrides (MemberTimeToTarget): its metric, its run, its stop
    whose = ""  # how log lines name whose target it is

    def watched(self) -> str:
        return str(self.metric)

    def _log(self, trainer: L.Trainer, metrics: dict[str, float]) -> None:
        log_metrics(trainer, metrics)

    def _tag(self, trainer: L.Trainer, tags: dict[str, str]) -> None:
        set_tags(trainer, tags)

    def _stop(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.should_stop = True

    def _reached(self, trainer: L.Trainer) -> bool:
        current = trainer.callback_metrics.get(self.watched())
        if current is None:
            logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
            raise ConfigError(
                f"{KEY}.metric", self.metric, f"a metric logged at validation ({logged})"
            )
        current = float(current)
        return current >= self.value if self.mode == "max" else current <= self.value

    def on_fit_end(self, trainer: L.Trainer, *_: Any) -> None:
        if self.start is not None and not self.met:
            self._tag(trainer, {TARGET_MET_TAG: "false"})
            log.info(
                "%starget %s not met in %d epochs",
                self.whose,
                self.description,
                trainer.current_epoch,
            )


class MemberTimeToTarget(TimeToTarget):
    """:class:`TimeToTarget` of member ``member`` of a fused array: its ``fused<i>/`` metric
    decides, its run gets the figures, and ``stop=true`` freezes that member alone."""

    def __init__(self, member: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.member = member
        self.whose = f"member {member}: "

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.member not in pl_module.frozen:  # a frozen member logs no metric to read
            super().on_validation_end(trainer, pl_module)

    def watched(self) -> str:
        return f"{member_prefix(self.member)}{self.metric}"

    def _log(self, trainer: L.Trainer, metrics: dict[str, float]) -> None:
        super()._log(trainer, member_named(metrics, self.member))

    def _tag(self, trainer: L.Trainer, tags: dict[str, str]) -> None:
        if not trainer.is_global_zero:
            return
        logger = trainer.loggers[self.member]
        for key, value in tags.items():
            logger.experiment.set_tag(logger.run_id, key, value)

    def _stop(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.frozen.add(self.member)
        if len(pl_module.frozen) == len(pl_module.members):
            trainer.should_stop = True
