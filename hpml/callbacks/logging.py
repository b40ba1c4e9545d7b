"""Send numbers and text to every logger a trainer has, from hooks where ``self.log`` is refused."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import MLFlowLogger


def resuming(trainer: L.Trainer) -> bool:
    """Whether this fit continues a checkpoint (``resume=``): what a run measures once, at fit
    start, is in it already, and the step is still 0 there (Lightning restores it later)."""
    return trainer.ckpt_path is not None


def log_metrics(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


def log_text(trainer: L.Trainer, text: str, artifact_file: str) -> None:
    """Store ``text`` as an artifact of the run (MLflow loggers only: others keep no files)."""
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            logger.experiment.log_text(logger.run_id, text, artifact_file)


def log_file(trainer: L.Trainer, path: str, artifact_dir: str) -> None:
    """Copy the file at ``path`` into the run's artifacts under ``artifact_dir``."""
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            logger.experiment.log_artifact(logger.run_id, path, artifact_dir)


def log_figure(trainer: L.Trainer, figure: object, artifact_file: str) -> None:
    """Store a matplotlib figure as an image artifact (PNG or SVG by the file's suffix)."""
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            logger.experiment.log_figure(logger.run_id, figure, artifact_file)
