"""Fault injection for end-to-end tests: a callback that raises part-way through training."""

from __future__ import annotations

import lightning as L


class FailAtEpoch(L.Callback):
    """Raises at the start of epoch ``epoch``, after earlier epochs have logged their metrics."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            raise RuntimeError(f"injected failure at epoch {self.epoch}")
