"""The one door from callbacks to the run: numbers, tags, text and files, from rank zero only.

Callbacks log from hooks where ``self.log`` is refused (fit start and end, profiler windows) and
store things ``self.log`` cannot (tags, artifacts). Under DDP every rank runs every hook; only
rank zero writes, so a run gets each record once. Artifacts and tags go to MLflow loggers only:
other loggers keep no files.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import MLFlowLogger

from hpml.names import step_tag


def resuming(trainer: L.Trainer) -> bool:
    """Whether this fit continues a checkpoint (``resume=``): what a run measures once, at fit
    start, is in it already, and the step is still 0 there (Lightning restores it later)."""
    return trainer.ckpt_path is not None


def mlflow_loggers(trainer: L.Trainer) -> list[MLFlowLogger]:
    """The trainer's MLflow loggers, on rank zero; none on the other ranks."""
    if not trainer.is_global_zero:
        return []
    return [logger for logger in trainer.loggers if isinstance(logger, MLFlowLogger)]


def log_metrics(trainer: L.Trainer, metrics: dict[str, float], step: int | None = None) -> None:
    """``metrics`` at ``step`` (default: the trainer's global step) to every logger."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step if step is None else step)


def set_tags(trainer: L.Trainer, tags: dict[str, str]) -> None:
    for logger in mlflow_loggers(trainer):
        for key, value in tags.items():
            logger.experiment.set_tag(logger.run_id, key, value)


def set_step_tags(trainer: L.Trainer, step: str, tags: dict[str, str]) -> None:
    """``tags`` of how ``step`` ran, each key under the step's prefix (``hpml.<step>.<key>``)."""
    set_tags(trainer, {step_tag(step, key): value for key, value in tags.items()})


def log_text(trainer: L.Trainer, text: str, artifact_file: str) -> None:
    """Store ``text`` as an artifact of the run."""
    for logger in mlflow_loggers(trainer):
        logger.experiment.log_text(logger.run_id, text, artifact_file)


def log_file(trainer: L.Trainer, path: str | Path, artifact_dir: str) -> None:
    """Copy the file at ``path`` into the run's artifacts under ``artifact_dir``."""
    for logger in mlflow_loggers(trainer):
        logger.experiment.log_artifact(logger.run_id, str(path), artifact_dir)


def log_figure(trainer: L.Trainer, figure: object, artifact_file: str) -> None:
    """Store a matplotlib figure as an image artifact (PNG or SVG by the file's suffix)."""
    for logger in mlflow_loggers(trainer):
        logger.experiment.log_figure(logger.run_id, figure, artifact_file)
