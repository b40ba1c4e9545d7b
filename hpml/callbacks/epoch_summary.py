"""One line per epoch when there is no progress bar: what a log file, CI or SLURM output needs.

Logs ``epoch 1/2  train/loss 0.6931  val/loss 0.6925  val/acc 0.5100  3.2 s`` at each training
epoch's end and one ``test`` line; with a bar it stays silent.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar

import lightning as L

from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.models.base import ArrayModule
from hpml.names import member_prefix

log = logging.getLogger(__name__)

SHOWN = ("loss", "acc")


def summary(trainer: L.Trainer, stages: tuple[str, ...]) -> str:
    """``stage/name value`` for each of those metrics the trainer has, in a fixed order; for a
    fused array each member's value, in member order: ``val/loss 0.6925 | 0.7012``."""
    metrics = trainer.callback_metrics
    module = trainer.lightning_module
    size = len(module.members) if isinstance(module, ArrayModule) else 0
    parts = []
    for stage in stages:
        for name in SHOWN:
            key = f"{stage}/{name}"
            if key in metrics:
                parts.append(f"{key} {float(metrics[key]):.4f}")
            values = [metrics.get(f"{member_prefix(i)}{key}") for i in range(size)]
            if any(value is not None for value in values):
                shown = " | ".join("-" if v is None else f"{float(v):.4f}" for v in values)
                parts.append(f"{key} {shown}")
    return "  ".join(parts)


class EpochSummary(HpmlCallback):
    """Logs one line per training epoch and one after test, when the trainer shows no bar."""

    # in a fused array: one line per epoch, each member's values in it
    in_array: ClassVar[InArray] = InArray.ONCE

    def __init__(self) -> None:
        self.started = 0.0

    def _log(self, trainer: L.Trainer, head: str, stages: tuple[str, ...]) -> None:
        """``head``, the stages' numbers and the seconds since the epoch started, unless a bar
        shows them."""
        if trainer.progress_bar_callback is not None or trainer.sanity_checking:
            return
        numbers = summary(trainer, stages)
        seconds = time.perf_counter() - self.started
        log.info("%s  %s%.1f s", head, f"{numbers}  " if numbers else "", seconds)

    def on_train_epoch_start(self, *_: Any) -> None:
        self.started = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, *_: Any) -> None:
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        epoch = f"epoch {trainer.current_epoch + 1}" + (f"/{total}" if total else "")
        if 0 < trainer.max_steps <= trainer.global_step:  # Lightning's own line is dropped
            epoch += f" (trainer.max_steps={trainer.max_steps} reached)"
        self._log(trainer, epoch, ("train", "val"))

    on_test_epoch_start = on_train_epoch_start

    def on_test_epoch_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._log(trainer, "test", ("test",))
