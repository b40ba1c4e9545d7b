"""Throughput, step-time percentiles, data-wait share, epoch times and peak memory, per epoch."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.trainer.states import TrainerFn

from hpml.analysis.memory import peak_memory_bytes, peak_rss_bytes
from hpml.analysis.timing import StepTimer, synchronized_now
from hpml.names import BYTES, MS, PCT, SAMPLES_PER_S, S, metric


def batch_size(batch: Any) -> int:
    """Samples in a batch: the leading size of its first tensor."""
    while isinstance(batch, list | tuple | dict):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return int(batch.shape[0])


class PerformanceMonitor(L.Callback):
    """Speed and memory of training and inference, as Composer's speed monitor does for training.

    Per training epoch: ``train/throughput_samples_per_s`` (samples after ``warmup_steps`` over the
    wall time they took, data loading included), ``train/step_time_{mean,p50,p90}_ms``,
    ``train/data_wait_pct`` (share of that wall time spent between steps, fetching data),
    ``train/epoch_time_s`` (validation excluded) and ``train/peak_memory_bytes``. For validation
    and test: ``{val,test}/epoch_time_s`` and the inference ``{val,test}/throughput_samples_per_s``
    after ``inference_warmup_steps``. The GPU is synchronised only at the edges of a window.
    """

    def __init__(self, warmup_steps: int = 3, inference_warmup_steps: int = 1) -> None:
        self.warmup_steps = warmup_steps
        self.inference_warmup_steps = inference_warmup_steps
        self.timers: dict[str, StepTimer] = {}
        self.epoch_start: dict[str, float] = {}
        self.val_seconds_in_train_epoch = 0.0

    def _start(self, stage: str, device: torch.device) -> None:
        warmup = self.warmup_steps if stage == "train" else self.inference_warmup_steps
        self.timers[stage] = StepTimer(device, warmup)
        self.epoch_start[stage] = synchronized_now(device)

    def _finish(self, stage: str, pl_module: L.LightningModule) -> dict[str, float]:
        elapsed = synchronized_now(pl_module.device) - self.epoch_start[stage]
        metrics = {metric(stage, "epoch_time", S): elapsed}
        stats = self.timers[stage].stats()
        if stats is not None:
            metrics[metric(stage, "throughput", SAMPLES_PER_S)] = stats.throughput_samples_per_s
            if stage == "train":
                metrics |= {
                    metric(stage, "step_time_mean", MS): stats.step_mean_ms,
                    metric(stage, "step_time_p50", MS): stats.step_p50_ms,
                    metric(stage, "step_time_p90", MS): stats.step_p90_ms,
                    metric(stage, "data_wait", PCT): stats.data_wait_pct,
                }
        peak, _ = peak_memory_bytes(pl_module.device)
        metrics[metric(stage, "peak_memory", BYTES)] = peak
        if pl_module.device.type == "cuda":
            metrics[metric(stage, "peak_rss", BYTES)] = peak_rss_bytes()
        return metrics

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        _, source = peak_memory_bytes(pl_module.device)
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                logger.experiment.set_tag(logger.run_id, "hpml.peak_memory_source", source)

    # training
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.val_seconds_in_train_epoch = 0.0
        self._start("train", pl_module.device)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        self.timers["train"].begin()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self.timers["train"].end(batch_size(batch))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = self._finish("train", pl_module)
        metrics[metric("train", "epoch_time", S)] -= self.val_seconds_in_train_epoch
        pl_module.log_dict(metrics, on_step=False, on_epoch=True)

    # validation and test: inference speed
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._start("val", pl_module.device)

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                  batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self.timers["val"].begin()

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self.timers["val"].end(batch_size(batch))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = self._finish("val", pl_module)
        if trainer.state.fn == TrainerFn.FITTING:
            self.val_seconds_in_train_epoch += metrics[metric("val", "epoch_time", S)]
        pl_module.log_dict(metrics, on_step=False, on_epoch=True)

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start("test", pl_module.device)

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                            batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.timers["test"].begin()

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                          outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self.timers["test"].end(batch_size(batch))

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.log_dict(self._finish("test", pl_module), on_step=False, on_epoch=True)
