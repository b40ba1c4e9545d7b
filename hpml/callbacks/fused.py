"""Callbacks of one member of a fused array (:mod:`hpml.models.fused`): what a serial job's
callback does for its run, done for the member's metric, in the member's run."""

from __future__ import annotations

from typing import Any

import lightning as L

from hpml.callbacks.target import TimeToTarget
from hpml.names import member_prefix


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
        prefix = member_prefix(self.member)
        super()._log(trainer, {f"{prefix}{name}": value for name, value in metrics.items()})

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
