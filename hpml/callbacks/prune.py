"""When to prune, and what it did: the ``prune`` config group's callback.

How is :mod:`hpml.optimize.prune`; this decides when, rebuilds the optimisers after physical
pruning, folds masks in before test, and measures the net before and after. Metrics and
artifacts: docs/pruning.md.
"""

from __future__ import annotations

import copy
import json
import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from torch import nn

from hpml.analysis.flops import count_flops
from hpml.analysis.model_stats import nonzero_param_count, param_count
from hpml.callbacks.logging import log_file, log_metrics, log_text, mlflow_loggers
from hpml.callbacks.measure import (
    Side,
    compare,
    quality_name,
    size_and_quality,
    val_loader,
    validation_quality,
)
from hpml.callbacks.measure_settings import OptimizationStep, built
from hpml.errors import ConfigError, non_negative_int, one_of
from hpml.names import AFTER, BEFORE, COUNT, FLOPS_PER_SAMPLE, PCT, metric, side
from hpml.optimize.prune import io as prune_io
from hpml.optimize.prune import schedule as schedules
from hpml.optimize.prune.amount import check_amount
from hpml.optimize.prune.mask import folded_copy
from hpml.optimize.prune.methods import Method
from hpml.optimize.prune.pruner import Pruner, PruneReport
from hpml.optimize.prune.sensitivity import scan
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS

log = logging.getLogger(__name__)


class Prune(OptimizationStep):
    """Prune ``pl_module.net`` by ``method`` to ``amount`` on ``schedule``; log before and after.

    Args:
        method: the method, or what builds it (its option's ``_partial_`` ``method`` node, so
            a refused knob is named ``prune.method.<knob>``); runs record its name as the param
            ``prune.method``.
        amount: the share of the targeted weights (rows, when structured) removed, in [0, 1).
        mode, targets, exclude, min_channels, embedding, round_to:
            :class:`~hpml.optimize.prune.Pruner`'s.
        schedule: ``before_fit``, ``after_fit`` or ``gradual`` (:mod:`...prune.schedule`).
        finetune_epochs: epochs added after pruning (``after_fit``, ``gradual``).
        sensitivity: amounts at which each weight is pruned alone and the model judged.
        save_model: log the pruned model with its architecture (``prune/model.pt``).
        **measure: the knobs of :class:`~hpml.callbacks.measure_settings.OptimizationStep`.
    """

    stage, under_ddp = "prune", "mask"

    def __init__(
        self,
        method: Method | Callable[[], Method],
        amount: float = 0.5,
        mode: str | None = None,
        targets: Sequence[str] | None = DEFAULT_TARGETS,
        exclude: Sequence[str] | None = DEFAULT_EXCLUDE,
        schedule: str = "after_fit",
        finetune_epochs: int = 1,
        min_channels: int = 1,
        embedding: bool = False,
        round_to: int = 1,
        sensitivity: Sequence[float] = (),
        save_model: bool = False,
        **measure: Any,
    ) -> None:
        super().__init__(**measure)
        self.amount = check_amount(amount)
        self.schedule = one_of("schedule", schedule, schedules.SCHEDULES)
        self.finetune_epochs = non_negative_int("finetune_epochs", finetune_epochs)
        self.sensitivity = [check_amount(a, "sensitivity") for a in (sensitivity or [])]
        self.save_model = bool(save_model)
        if targets is not None and not list(targets):
            raise ConfigError(
                "targets", [], "at least one module name or type, or null: the defaults"
            )
        method = built(method, Method)  # the Pruner defaults null targets and copies the lists
        self.pruner = Pruner(
            method, mode, targets, exclude, min_channels, embedding, round_to=round_to
        )
        self.steps: dict[int, float] = {}  # epoch -> absolute amount
        self.before: dict[str, float] = {}  # counts, FLOPs and sparsity before the first step
        self.kept: nn.Module | None = None  # the unpruned net, until it is timed beside the pruned
        self.pruned = False

    @property
    def safe_under_ddp(self) -> bool:
        """Masks keep the parameters DDP wrapped; physical pruning replaces them."""
        return self.pruner.mode != "physical"

    @property
    def knob(self) -> tuple[str, str]:
        return "mode", self.pruner.mode

    # -- when -----------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for logger in mlflow_loggers(trainer):
            logger.log_hyperparams({"prune.method": self.pruner.method.name})
        if stage != "fit":
            return
        epochs = trainer.fit_loop.max_epochs
        if epochs is None or epochs < 1:
            raise ConfigError(
                "trainer.max_epochs",
                epochs,
                "a positive number of epochs when pruning (it sets the schedule)",
            )
        self.steps = schedules.steps(self.schedule, self.amount, epochs)
        if self.schedule != "before_fit":
            trainer.fit_loop.max_epochs = epochs + self.finetune_epochs

    def check_model(self, pl_module: L.LightningModule, *_: Any) -> None:
        """Every ``targets`` and ``exclude`` entry names something in the net."""
        try:
            self.pruner.check(pl_module.net)
        except ConfigError as exc:
            raise exc.under("prune") from None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        try:
            self.pruner.attach(pl_module.net, pl_module.example_input(2))
        except ConfigError as exc:
            raise exc.under("prune") from exc
        log_text(trainer, str(pl_module.net), "prune/architecture_before.txt")
        log_metrics(trainer, {metric("prune", "target_sparsity", PCT): 100 * self.amount})
        if self.schedule == "before_fit":
            self._prune(trainer, pl_module, self.amount, first=True, last=True)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.current_epoch
        if epoch in self.steps:
            first, last = epoch == min(self.steps), epoch == max(self.steps)
            self._prune(trainer, pl_module, self.steps[epoch], first, last)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.pruned and self.steps:  # after_fit without fine-tuning: prune at the end
            self._prune(trainer, pl_module, self.amount, first=True, last=True)
        elif self.pruned and (self.schedule != "after_fit" or self.finetune_epochs > 0):
            final = Side("prune_final", self._shipped(pl_module.net), pl_module.device)
            found = size_and_quality(trainer, pl_module, self.settings, final)
            log_metrics(trainer, self.counts(pl_module, "prune_final") | found)
        self.pruner.finalize(pl_module.net)
        if self.save_model:
            with tempfile.TemporaryDirectory() as tmp:
                log_file(trainer, prune_io.save(pl_module.net, Path(tmp) / "model.pt"), "prune")

    # -- what -----------------------------------------------------------------------------
    def _prune(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        amount: float,
        first: bool,
        last: bool,
    ) -> None:
        if first:
            self.before = self.counts(pl_module, side("prune", BEFORE))
            log_metrics(trainer, self.before)
            self.kept = copy.deepcopy(pl_module.net)  # timed beside the pruned net, then dropped
            if self.sensitivity:
                self._sensitivity(trainer, pl_module)
        report = self.pruner.prune(pl_module.net, amount)
        self.pruned = True
        log.info(
            "pruned %s to %.3f: sparsity %.4f, rows %.4f",
            type(pl_module.net).__name__,
            amount,
            report.sparsity,
            report.row_sparsity,
        )
        if self.pruner.mode == "physical" and trainer.optimizers:
            trainer.strategy.setup_optimizers(trainer)  # the old ones hold removed parameters
        if last:
            self._log_last(trainer, pl_module, report)

    def _log_last(
        self, trainer: L.Trainer, pl_module: L.LightningModule, report: PruneReport
    ) -> None:
        after = self.counts(pl_module, side("prune", AFTER))
        kept, self.kept = self.kept, None
        assert kept is not None  # set on the first step, which precedes or is the last
        unpruned = Side(side("prune", BEFORE), kept, pl_module.device)
        shipped = Side(side("prune", AFTER), self._shipped(pl_module.net), pl_module.device)
        comparison = compare(trainer, pl_module, self.settings, "prune", unpruned, shipped)
        # FLOPs and size, before / after (the speed-ups come with the side-by-side timing)
        metrics = after | schedules.reductions(self.before | after | comparison.metrics)
        for name, stats in report.layers.items():
            metrics[metric("prune_layer", f"{name}_sparsity", PCT)] = 100 * stats.sparsity
            metrics[metric("prune_layer", f"{name}_row_sparsity", PCT)] = 100 * stats.row_sparsity
        comparison.log(trainer, metrics)
        log_text(trainer, str(pl_module.net), "prune/architecture_after.txt")
        table = report.table(self.pruner.method.name, self.pruner.mode)
        log_text(trainer, json.dumps(table, indent=2), "prune/layers.json")

    def counts(self, pl_module: L.LightningModule, stage: str) -> dict[str, float]:
        """Parameters, FLOPs and sparsity of the net as it is now."""
        shipped = self._shipped(pl_module.net)
        flops = count_flops(shipped, pl_module.example_input(1)).per_sample
        report = self.pruner.report(pl_module.net, self.amount)
        return {
            metric(stage, "params", COUNT): param_count(shipped),
            metric(stage, "nonzero_params", COUNT): nonzero_param_count(shipped),
            metric(stage, "fwd", FLOPS_PER_SAMPLE): flops,
            metric(stage, "sparsity", PCT): 100 * report.sparsity,
            metric(stage, "row_sparsity", PCT): 100 * report.row_sparsity,
        }

    def _shipped(self, net: nn.Module) -> nn.Module:
        """The net as deployed: masks folded in (a copy) in mask mode, itself otherwise."""
        if self.pruner.mode == "mask" and self.pruned:
            return folded_copy(net)
        return net

    def _sensitivity(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Each target alone pruned at each ``sensitivity`` amount (a mask, then restored), the
        scan itself :func:`hpml.optimize.prune.sensitivity.scan`; logged here."""
        loader = val_loader(trainer)
        if loader is None or self.settings.eval_batches == 0:
            return

        def quality() -> dict[str, float]:
            found = validation_quality(pl_module, loader, self.settings.eval_batches)
            return dict(quality_name(k, v) for k, v in found.items())

        pruner = self.pruner
        results = scan(
            pl_module.net, pruner.targets, pruner.method.mask_alone, self.sensitivity, quality
        )
        for weight, by_amount in results.items():
            for pct, named in by_amount.items():
                values = {}
                for q, v in named.items():
                    quantity, unit = q.rsplit("_", 1)
                    values[metric("prune_sensitivity", f"{weight}_{quantity}", unit)] = v
                log_metrics(trainer, values, step=pct)
        log_text(trainer, json.dumps(results, indent=2), "prune/sensitivity.json")
