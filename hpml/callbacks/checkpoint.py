"""Last and best checkpoints at training epoch ends, after the performance monitor's windows.

Saving on ``on_train_epoch_end`` keeps checkpoint I/O out of the timed figures: Lightning runs
checkpoint callbacks after every other callback's hook, so ``callbacks.perf`` has closed its
epoch window before the file is written.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, ClassVar
from weakref import proxy

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray


class EpochCheckpoint(ModelCheckpoint, HpmlCallback):
    """``ModelCheckpoint`` whose ``last.ckpt`` is the latest epoch, best or not, and can move.

    Lightning writes ``last.ckpt`` only with a top-k save at the same step, which would make a
    resume go back in time. A resumed run writes into its own output folder and keeps its best
    score. An epoch that ends before any validation ran (``trainer.max_steps`` reached
    mid-epoch, validation off or every few epochs) saves ``last.ckpt`` only, without Lightning's
    warning that the monitored metric was never logged.

    At an epoch whose ``best.ckpt`` was just written, ``last.ckpt`` is a hard link to it: the
    same state, written once (a network's checkpoint with its optimiser's state is hundreds of
    megabytes). A later epoch that is not the best writes ``last.ckpt`` afresh: Lightning's
    save goes to a temporary file renamed into place, so the link breaks and ``best.ckpt``
    keeps its epoch.
    """

    # in a fused array: an array keeps no checkpoints (a sweep started again restarts its members)
    in_array: ClassVar[InArray] = InArray.NOT_IN_ARRAYS

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("save_on_train_epoch_end", True)
        super().__init__(**kwargs)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if (
            self.save_last
            and self._should_save_on_train_epoch_end(trainer)
            and not self._should_skip_saving_checkpoint(trainer)
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer: L.Trainer, candidates: dict[str, Any]) -> None:
        """``last.ckpt`` as a hard link to the checkpoint saved at this very step, else saved."""
        best = self._last_checkpoint_saved
        saved_now = best and self._last_global_step_saved == trainer.global_step
        if not (self.save_last and saved_now and not self._enable_version_counter):
            super()._save_last_checkpoint(trainer, candidates)
            return
        last = self.format_checkpoint_name(candidates, self.CHECKPOINT_NAME_LAST)
        if os.path.abspath(last) == os.path.abspath(best):
            return
        previous, self.last_model_path = self.last_model_path, last
        if trainer.is_global_zero:
            if os.path.lexists(last):
                os.remove(last)
            try:
                os.link(best, last)
            except OSError:  # a filesystem without hard links: a copy
                shutil.copyfile(best, last)
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))
        trainer.strategy.barrier()
        if previous and self._should_remove_checkpoint(trainer, previous, last):
            self._remove_checkpoint(trainer, previous)

    def _save_topk_checkpoint(self, trainer: L.Trainer, candidates: dict[str, Any]) -> None:
        validated = trainer.fit_loop.epoch_loop.val_loop._has_run  # a mistyped monitor: fails
        if self.monitor is None or self.monitor in candidates or validated:
            super()._save_topk_checkpoint(trainer, candidates)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore best-so-far even from another folder: Lightning keeps only ``best_model_path``
        when ``dirpath`` differs. Recorded paths stay as they are; Lightning removes old
        checkpoints only inside its own ``dirpath``, so the stopped job's files are kept."""
        super().load_state_dict({**state_dict, "dirpath": self.dirpath})
