"""Parameters, non-zero parameters and saved size of the model, when fit starts and after test."""

from __future__ import annotations

from typing import ClassVar

import lightning as L

from hpml.analysis.model_stats import nonzero_param_count, param_count, state_dict_bytes
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_metrics, log_text, resuming
from hpml.names import BYTES, COUNT, member_named, metric


class ModelStats(HpmlCallback):
    """Logs ``model/params_count``, ``model/trainable_params_count``,
    ``model/nonzero_params_count``, ``model/size_bytes`` and ``print(model)`` as an artifact; again
    after ``test`` as ``model_final/...``, so changes made during the run show."""

    in_array: ClassVar[InArray] = InArray.PER_MEMBER

    def for_members(self, size: int) -> list[L.Callback]:
        """One :class:`MemberStats` for an array's members."""
        return [MemberStats()]

    def stats(self, module: L.LightningModule, stage: str) -> dict[str, float]:
        """Counts and size; a quantised or compiled net keeps no parameters in the module tree,
        so its counts are left out rather than logged as 0 (its saved size still counts)."""
        found: dict[str, float] = {}
        if param_count(module) > 0:
            found |= {
                metric(stage, "params", COUNT): param_count(module),
                metric(stage, "trainable_params", COUNT): param_count(module, trainable_only=True),
                metric(stage, "nonzero_params", COUNT): nonzero_param_count(module),
            }
        if module.state_dict():
            found[metric(stage, "size", BYTES)] = state_dict_bytes(module)
        return found

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if resuming(trainer):
            return
        log_metrics(trainer, self.stats(pl_module, "model"))
        log_text(trainer, str(pl_module), "model/architecture.txt")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_metrics(trainer, self.stats(pl_module, "model_final"))


class MemberStats(ModelStats):
    """Each member's ``model/*`` counts and size in its own run, and its forward and
    forward+backward FLOPs per sample, which the speed monitor leaves to it on an array."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from hpml.analysis.flops import count_flops
        from hpml.callbacks.flop_budget import per_sample_metrics

        for index, member in enumerate(pl_module.members):
            example = member.example_input(1)
            forward, both = (count_flops(member, example, backward) for backward in (False, True))
            counted = self.stats(member, "model") | per_sample_metrics(forward, both)
            log_metrics(trainer, member_named(counted, index))
        log_text(trainer, str(pl_module.members[0]), "model/architecture.txt")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for index, member in enumerate(pl_module.members):
            log_metrics(trainer, member_named(self.stats(member, "model_final"), index))
