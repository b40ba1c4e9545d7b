"""Callbacks of one member of a fused array (:mod:`hpml.models.fused`): what a serial job's
callback does for its run, done for the member's metric, in the member's run."""

from __future__ import annotations

from typing import Any

import lightning as L

from hpml.callbacks.logging import log_metrics, log_text
from hpml.callbacks.model_stats import ModelStats
from hpml.callbacks.target import TimeToTarget
from hpml.names import FLOPS_PER_SAMPLE, member_prefix, metric


def prefixed(metrics: dict[str, float], member: int) -> dict[str, float]:
    """``metrics`` named for member ``member``'s run (:class:`hpml.tracking.fused.MemberLogger`)."""
    return {f"{member_prefix(member)}{name}": value for name, value in metrics.items()}


class MemberStats(ModelStats):
    """Each member's ``model/*`` counts and size in its own run, as a serial run's
    :class:`~hpml.callbacks.model_stats.ModelStats` logs them, and its forward and
    forward+backward FLOPs per sample (2 x MAC), which the speed monitor would count for all
    members at once on an array (``fuse.callbacks.perf.count_flops: false``)."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from hpml.analysis.flops import count_flops

        for index, member in enumerate(pl_module.members):
            example = member.example_input(1)
            counted = self.stats(member, "model") | {
                metric("model", "fwd", FLOPS_PER_SAMPLE): count_flops(member, example).per_sample,
                metric("model", "fwd_bwd", FLOPS_PER_SAMPLE): count_flops(
                    member, example, with_backward=True
                ).per_sample,
            }
            log_metrics(trainer, prefixed(counted, index))
        log_text(trainer, str(pl_module.members[0]), "model/architecture.txt")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for index, member in enumerate(pl_module.members):
            log_metrics(trainer, prefixed(self.stats(member, "model_final"), index))


class MemberTimeToTarget(TimeToTarget):
    """:class:`~hpml.callbacks.target.TimeToTarget` of member ``member``: its ``fused<i>/``
    metric decides, its run gets the figures and tags, and ``stop=true`` freezes that member
    alone, as its serial job would have stopped; the array stops once every member has."""

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
        super()._log(trainer, prefixed(metrics, self.member))

    def _tag(self, trainer: L.Trainer, tags: dict[str, str]) -> None:
        if not trainer.is_global_zero:
            return
        logger = trainer.loggers[self.member]
        for key, value in tags.items():
            logger.experiment.set_tag(logger.run_id, key, value)

    def _stop(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.frozen.add(self.member)
        if len(pl_module.frozen) == len(pl_module):
            trainer.should_stop = True


def member_targets(node: Any, size: int) -> list[MemberTimeToTarget]:
    """One :class:`MemberTimeToTarget` per member from the ``callbacks.target`` config node
    (none while its metric is null)."""
    if not node or node.get("metric") is None:
        return []
    knobs = {key: node.get(key) for key in ("metric", "value", "mode", "stop")}
    return [MemberTimeToTarget(member, **knobs) for member in range(size)]
