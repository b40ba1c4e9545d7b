"""When to prune, and what it did: the ``prune`` config group's callback.

How to prune is :mod:`hpml.optimize.prune` (plain PyTorch: methods, engines, the amount at each
step, the sensitivity scan); this callback only decides when (``before_fit``, ``after_fit``,
``gradual``), rebuilds the optimisers after physical pruning, folds masks in before test and
anything saved, and measures the net before and after side by side (an unpruned deep copy, held
until the last step). Its metrics and artifacts: docs/pruning.md.
"""

from __future__ import annotations

import copy
import json
import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import lightning as L
from torch import nn

from hpml.analysis.flops import count_flops
from hpml.analysis.model_stats import nonzero_param_count, param_count
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_file, log_metrics, log_text
from hpml.callbacks.measure import (
    Side,
    compare,
    figures,
    quality_name,
    val_loader,
    validation_quality,
)
from hpml.callbacks.measure_settings import (
    LATENCY_BUDGET_S,
    LATENCY_CI_WIDTH,
    LATENCY_CLOCK,
    LATENCY_MIN_RUN_TIME_S,
    LATENCY_ROUNDS,
    Budget,
    Clock,
    RunTime,
    Settings,
    Width,
)
from hpml.errors import ConfigError, non_negative_int
from hpml.names import COUNT, FLOPS_PER_SAMPLE, PCT, metric
from hpml.optimize.prune import io as prune_io
from hpml.optimize.prune import schedule as schedules
from hpml.optimize.prune.amount import check_amount
from hpml.optimize.prune.mask import folded_copy
from hpml.optimize.prune.methods import Method
from hpml.optimize.prune.pruner import Pruner, PruneReport
from hpml.optimize.prune.sensitivity import scan
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS
from hpml.ranges import Count

log = logging.getLogger(__name__)


class Prune(L.Callback):
    """Prune ``pl_module.net`` by ``importance`` to ``amount`` on ``schedule``; log before and
    after.

    ``method`` is the method's name in runs (the param ``prune.method``, ``prune/layers.json``);
    ``importance`` the method itself, or what builds it (its config option's ``_partial_``
    ``_target_`` node, so a refused knob is named ``prune.importance.<knob>``; by default the
    method called ``method``). See the module docstring for the schedules and the metrics.
    ``targets``/``exclude``: see :mod:`hpml.optimize.prune.targets` (``exclude: [output_layer]``
    keeps the output size).
    """

    # in a fused array: it prunes the one net it is given: an array trains plain nets
    in_array: ClassVar[InArray] = InArray.SERIAL

    def __init__(
        self,
        method: str = "l1_structured",
        importance: Method | Callable[[], Method] | None = None,
        amount: float = 0.5,
        mode: str | None = None,
        targets: Sequence[str] | None = DEFAULT_TARGETS,
        exclude: Sequence[str] | None = DEFAULT_EXCLUDE,
        schedule: str = "after_fit",
        finetune_epochs: int = 1,
        min_channels: int = 1,
        embedding: bool = False,
        latency_batch_size: int = 32,
        latency_rounds: Count = LATENCY_ROUNDS,
        latency_min_run_time_s: RunTime = LATENCY_MIN_RUN_TIME_S,
        latency_budget_s: Budget = LATENCY_BUDGET_S,
        latency_ci_width: Width = LATENCY_CI_WIDTH,
        latency_clock: Clock = LATENCY_CLOCK,
        eval_batches: int | None = None,
        sensitivity: Sequence[float] = (),
        save_model: bool = False,
    ) -> None:
        self.amount = check_amount(amount)
        self.schedule = schedules.check_schedule(schedule)
        self.finetune_epochs = non_negative_int("finetune_epochs", finetune_epochs)
        self.settings = Settings.checked(
            latency_batch_size,
            latency_rounds,
            latency_min_run_time_s,
            eval_batches,
            latency_budget_s,
            latency_ci_width,
            latency_clock,
        )
        self.sensitivity = [check_amount(a, "sensitivity") for a in (sensitivity or [])]
        self.save_model = bool(save_model)
        if importance is not None and not isinstance(importance, Method):
            try:
                importance = importance()
            except ConfigError as exc:
                raise exc.under("importance") from exc
        if importance is not None and importance.name and importance.name != method:
            raise ConfigError(
                "method",
                method,
                f"{importance.name}, the method prune.importance builds (another method is "
                "another option: prune=<its name>)",
            )
        self.method = method
        self.pruner = Pruner(
            method if importance is None else importance,
            mode,
            list(targets or DEFAULT_TARGETS),
            None if exclude is None else list(exclude),
            min_channels,
            embedding,
        )
        self.train_epochs = 0
        self.steps: dict[int, float] = {}  # epoch -> absolute amount
        self.before: dict[str, float] = {}  # counts, FLOPs and sparsity before the first step
        self.after: dict[str, float] = {}  # the same after the last
        self.kept: nn.Module | None = None  # the unpruned net, until it is timed beside the pruned
        self.report: PruneReport | None = None
        self.pruned = False

    # -- when -----------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        epochs = trainer.fit_loop.max_epochs
        if epochs is None or epochs < 1:
            raise ConfigError(
                "trainer.max_epochs",
                epochs,
                "a positive number of epochs when pruning (it sets the schedule)",
            )
        self.train_epochs = epochs
        self.steps = schedules.steps(self.schedule, self.amount, epochs)
        if self.schedule != "before_fit":
            trainer.fit_loop.max_epochs = epochs + self.finetune_epochs

    def check_model(
        self,
        pl_module: L.LightningModule,
        build_net: Callable[[], nn.Module],
        input_shape: Sequence[int],
        name: str,
    ) -> None:
        """Before training, on the meta-built module: every ``targets`` and ``exclude`` entry
        names something in the net (hpml.validate asks each step it builds)."""
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
            found = figures(trainer, pl_module, self.settings, final)
            log_metrics(trainer, self.counts(pl_module, "prune_final") | found)
        self.pruner.finalize(pl_module.net)
        if self.save_model:
            self._save(trainer, pl_module.net)

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
            self.before = self.counts(pl_module, "prune_before")
            log_metrics(trainer, self.before)
            self.kept = copy.deepcopy(pl_module.net)  # timed beside the pruned net, then dropped
            if self.sensitivity:
                self._sensitivity(trainer, pl_module)
        self.report = self.pruner.prune(pl_module.net, amount)
        self.pruned = True
        log.info(
            "pruned %s to %.3f: sparsity %.4f, rows %.4f",
            type(pl_module.net).__name__,
            amount,
            self.report.sparsity,
            self.report.row_sparsity,
        )
        if self.pruner.mode == "physical" and trainer.optimizers:
            trainer.strategy.setup_optimizers(trainer)  # the old ones hold removed parameters
        if not last:
            return
        self.after = self.counts(pl_module, "prune_after")
        kept, self.kept = self.kept, None
        assert kept is not None  # set on the first step, which precedes or is the last
        device = pl_module.device
        comparison = compare(
            trainer,
            pl_module,
            self.settings,
            "prune",
            Side("prune_before", kept, device),
            Side("prune_after", self._shipped(pl_module.net), device),
        )
        # FLOPs and size, before / after (the speed-ups come with the side-by-side timing)
        metrics = self.after | schedules.reductions(self.before | self.after | comparison.metrics)
        for name, stats in self.report.layers.items():
            metrics[metric("prune_layer", f"{name}_sparsity", PCT)] = 100 * stats.sparsity
            metrics[metric("prune_layer", f"{name}_row_sparsity", PCT)] = 100 * stats.row_sparsity
        comparison.log(trainer, metrics)
        log_text(trainer, str(pl_module.net), "prune/architecture_after.txt")
        table = {
            "method": self.method,
            "mode": self.pruner.mode,
            "amount": amount,
            "sparsity": self.report.sparsity,
            "row_sparsity": self.report.row_sparsity,
            "widths": {k: list(v) for k, v in self.report.widths.items()},
            "layers": {k: v.to_dict() for k, v in self.report.layers.items()},
        }
        log_text(trainer, json.dumps(table, indent=2), "prune/layers.json")

    def counts(self, pl_module: L.LightningModule, stage: str) -> dict[str, float]:
        """Parameters, FLOPs and sparsity of the net as it is now."""
        shipped = self._shipped(pl_module.net)
        found = {
            metric(stage, "params", COUNT): param_count(shipped),
            metric(stage, "nonzero_params", COUNT): nonzero_param_count(shipped),
            metric(stage, "fwd", FLOPS_PER_SAMPLE): count_flops(
                shipped, pl_module.example_input(1)
            ).per_sample,
        }
        report = self.pruner.report(pl_module.net, self.amount)
        found[metric(stage, "sparsity", PCT)] = 100 * report.sparsity
        found[metric(stage, "row_sparsity", PCT)] = 100 * report.row_sparsity
        return found

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

        results = scan(
            pl_module.net, self.pruner.targets, self.pruner.mask_alone, self.sensitivity, quality
        )
        for weight, by_amount in results.items():
            for pct, named in by_amount.items():
                values = {
                    metric(
                        "prune_sensitivity",
                        f"{weight}_{q.rsplit('_', 1)[0]}",
                        q.rsplit("_", 1)[1],
                    ): v
                    for q, v in named.items()
                }
                log_metrics(trainer, values, step=pct)
        log_text(trainer, json.dumps(results, indent=2), "prune/sensitivity.json")

    def _save(self, trainer: L.Trainer, net: nn.Module) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = prune_io.save(net, Path(tmp) / "model.pt")
            log_file(trainer, path, "prune")
