"""An open MLflow run of a job or of a fused array's member: what the job logs as it trains."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import mlflow
from mlflow import MlflowClient
from mlflow.entities import RunTag

from hpml.errors import one_line
from hpml.hydra_job import HydraJob
from hpml.names import MODEL_ERROR_TAG, PROCESSES_TAG
from hpml.tracking.logger import AttachedMLFlowLogger, Select
from hpml.tracking.redact import redact_text
from hpml.tracking.tags import device_tags

if TYPE_CHECKING:  # the dataset and model loggers import torch: only a run that logs needs them
    from hpml.data.base import HpmlDataModule

log = logging.getLogger(__name__)
trace = logging.getLogger("hpml.trace")  # to the job log file only (conf/hydra/default.yaml)


class Tracker(Protocol):
    """What a run reads of the ``logger`` group that opened it (``MlflowTracker``)."""

    tracking_uri: str
    log_model: bool

    def attached_logger(self, run_id: str, select: Select | None) -> AttachedMLFlowLogger: ...


class TrackedRun:
    """An open run of a job (or of a fused array's member ``member``): its id, a Lightning
    logger bound to it, where it lives, and what goes in (its dataset) and out (its model).

    A job of one member keeps its run active (MLflow's fluent API); an array's members' runs are
    set ``aside`` (MLflow keeps one active run per thread), written to by id, reopened to end.

    Args:
        run: the MLflow run, as started.
        job: Hydra's job the run trains, None outside Hydra.
        member: the member's index in a fused array; None for a job of one member.
        tracker: the ``logger`` group that opened it: its store and what it logs.
    """

    def __init__(
        self,
        run: mlflow.ActiveRun,
        job: HydraJob | None,
        member: int | None,
        tracker: Tracker,
    ) -> None:
        self.job, self.member, self.tracker = job, member, tracker
        self.run_id: str = run.info.run_id
        self.experiment_id: str = run.info.experiment_id
        self.aside = member is not None

    def lightning_logger(self, select: Select | None = None) -> AttachedMLFlowLogger:
        """A Lightning logger of this run, keeping the metrics ``select`` picks (None: all)."""
        return self.tracker.attached_logger(self.run_id, select)

    def set_device(self, device: Any, processes: int = 1) -> None:
        """Tag the device the trainer actually chose (known only once the trainer exists) and
        how many processes train (``hpml.processes``: devices x nodes under DDP)."""
        tags = {**device_tags(device), PROCESSES_TAG: str(processes)}
        MlflowClient(self.tracker.tracking_uri).log_batch(
            self.run_id, tags=[RunTag(key, value) for key, value in tags.items()]
        )

    def log_dataset(self, datamodule: HpmlDataModule) -> None:
        """The prepared data as the run's dataset input (:mod:`hpml.tracking.dataset`), while
        the run is active. A failure warns, as in MLflow's autologgers: the data's config is in
        the params anyway."""
        from hpml.tracking.dataset import log_dataset

        best_effort("the dataset", log_dataset, datamodule)

    def set_tag(self, key: str, value: str) -> None:
        best_effort(f"tag {key}", mlflow.set_tag, key, value)

    def log_model(self, net: Any, datamodule: HpmlDataModule) -> None:
        """With ``logger.log_model``: the trained ``net``, while the run is active. A failure
        warns and is the tag ``hpml.model_error``; the run still ends FINISHED, as its metrics and
        checkpoints are its result."""
        if not self.tracker.log_model:
            return
        from hpml.tracking import model as logged_model

        whose = "the model" if self.member is None else f"member {self.member}'s model"
        try:
            logged_model.log_model(net, logged_model.example_input(datamodule))
        except Exception as exc:
            log.warning("could not log %s to MLflow: %s", whose, one_line(exc))
            trace.warning("could not log %s to MLflow", whose, exc_info=True)
            error = redact_text(one_line(exc))[:5000]
            best_effort(f"tag {MODEL_ERROR_TAG}", mlflow.set_tag, MODEL_ERROR_TAG, error)

    @property
    def ui_path(self) -> str:
        return f"#/experiments/{self.experiment_id}/runs/{self.run_id}"


def best_effort(what: str, action: Callable[..., None], *args: Any) -> None:
    """Record ``what`` (``the job log``) by ``action(*args)`` as far as MLflow takes it, for a
    run that is ending: a failure is one line, never masking the run's own error."""
    try:
        action(*args)
    except Exception as exc:  # the traceback goes to the job log, the terminal gets one line
        log.warning("could not record %s in MLflow: %s", what, one_line(exc))
        trace.warning("could not record %s in MLflow", what, exc_info=True)
