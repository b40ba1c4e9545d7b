"""Send numbers and text to every logger a trainer has, from hooks where ``self.log`` is refused."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import MLFlowLogger


def log_metrics(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


def log_text(trainer: L.Trainer, text: str, artifact_file: str) -> None:
    """Store ``text`` as an artifact of the run (MLflow loggers only: others keep no files)."""
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            logger.experiment.log_text(logger.run_id, text, artifact_file)
