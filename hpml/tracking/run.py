"""One MLflow run per job, started by hpml so system metrics, params and failures all land in it."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlflow
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from mlflow import MlflowClient
from omegaconf import DictConfig, OmegaConf

from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.store import experiment_id
from hpml.tracking.tags import default_run_name, device_tags, environment_tags, hydra_tags

PARENT_FILE = "mlflow_parent_run.json"
MAX_PARAM_CHARS = 6000  # MLflow 3's limit on one param value

log = logging.getLogger(__name__)
# MLflow announces every start and stop of its system-metrics thread at INFO: noise on every run.
logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``: one MLflow param per config leaf."""
    if isinstance(tree, dict):
        flat: dict[str, str] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    text = str(tree)
    if len(text) > MAX_PARAM_CHARS:
        text = text[: MAX_PARAM_CHARS - 3] + "..."
    return {prefix.rstrip("."): text}


def one_line(exc: BaseException) -> str:
    """``Type: message`` on a single line, for tags and terminals."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class TrackedRun:
    """The active run: its id, a Lightning logger bound to it, and where it lives."""

    def __init__(self, tracker: MlflowTracker, run: mlflow.ActiveRun) -> None:
        self.tracker = tracker
        self.run_id: str = run.info.run_id
        self.experiment_id: str = run.info.experiment_id

    def lightning_logger(self) -> AttachedMLFlowLogger:
        return AttachedMLFlowLogger(tracking_uri=self.tracker.tracking_uri, run_id=self.run_id)

    def set_device(self, device: Any) -> None:
        """Tag the device the trainer actually chose (known only once the trainer exists)."""
        mlflow.set_tags(device_tags(device))

    @property
    def ui_path(self) -> str:
        return f"#/experiments/{self.experiment_id}/runs/{self.run_id}"


class MlflowTracker:
    """Opens, records and closes MLflow runs for hpml jobs (config group ``logger``).

    ``tracking_uri`` is a local SQLite store by default or an MLflow server; ``artifact_root``
    places artifacts next to a local store. A run that raises ends FAILED with what it logged,
    the error as a tag and the traceback and job log as artifacts.
    """

    def __init__(self, tracking_uri: str, experiment_name: str = "hpml",
                 artifact_root: str | None = None, run_name: str | None = None,
                 log_system_metrics: bool = True, system_metrics_interval_s: float = 1.0) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.artifact_root = artifact_root
        self.run_name = run_name
        self.log_system_metrics = log_system_metrics
        self.system_metrics_interval_s = system_metrics_interval_s

    def client(self) -> MlflowClient:
        return MlflowClient(self.tracking_uri)

    def experiment_id(self) -> str:
        return experiment_id(self.client(), self.experiment_name, self.artifact_root)

    @contextmanager
    def run(self, cfg: DictConfig) -> Iterator[TrackedRun]:
        """Run ``cfg`` inside a fresh MLflow run (a child of its sweep's parent, if any)."""
        mlflow.set_tracking_uri(self.tracking_uri)
        if self.log_system_metrics:
            from mlflow.system_metrics import (
                set_system_metrics_samples_before_logging,
                set_system_metrics_sampling_interval,
            )

            set_system_metrics_sampling_interval(self.system_metrics_interval_s)
            set_system_metrics_samples_before_logging(1)
        active = mlflow.start_run(
            experiment_id=self.experiment_id(),
            run_name=self.run_name or default_run_name(),
            parent_run_id=sweep_parent(),
            tags={**environment_tags(), **hydra_tags()},
            log_system_metrics=self.log_system_metrics,
        )
        status = "FINISHED"
        try:
            _log_config(cfg)
            yield TrackedRun(self, active)
        except BaseException as exc:
            status = "KILLED" if interrupted(exc) else "FAILED"
            _best_effort(_log_failure, exc)
            raise
        finally:  # the run always ends, or the next job in this process could not start one
            _best_effort(_log_job_log)
            mlflow.end_run(status)


def _log_config(cfg: DictConfig) -> None:
    """The resolved config as params and as a file, plus Hydra's own record of the job."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    mlflow.log_params(flatten(resolved))
    mlflow.log_text(OmegaConf.to_yaml(resolved), "config/config_resolved.yaml")
    if HydraConfig.initialized():
        hydra_dir = Path(HydraConfig.get().runtime.output_dir) / HydraConfig.get().output_subdir
        if hydra_dir.is_dir():
            mlflow.log_artifacts(str(hydra_dir), "config/hydra")


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: Lightning turns KeyboardInterrupt into SystemExit(1), keeping it as the context."""
    return isinstance(exc, KeyboardInterrupt) or isinstance(exc.__context__, KeyboardInterrupt)


def _best_effort(action: Callable[..., None], *args: Any) -> None:
    """Record what can be recorded of a run that is ending; never mask the run's own error."""
    try:
        action(*args)
    except Exception:
        log.warning("could not record %s in MLflow", action.__name__, exc_info=True)


def _log_failure(exc: BaseException) -> None:
    mlflow.set_tag("hpml.error", one_line(exc)[:5000])
    mlflow.log_text("".join(traceback.format_exception(exc)), "error/traceback.txt")


def _log_job_log() -> None:
    """Upload the job's log file (Hydra's job logging), flushed first."""
    if not HydraConfig.initialized():
        return
    for handler in logging.getLogger().handlers:
        handler.flush()
    hc = HydraConfig.get()
    path = Path(hc.runtime.output_dir) / f"{hc.job.name}.log"
    if path.is_file():
        mlflow.log_artifact(str(path), "logs")


def sweep_parent() -> str | None:
    """Id of the sweep's parent run, written by ``MlflowSweepCallback`` into the sweep dir."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    path = Path(HydraConfig.get().sweep.dir) / PARENT_FILE
    if not path.is_file():
        log.warning("no parent run recorded at %s: this job is logged as a top-level run", path)
        return None
    return json.loads(path.read_text())["run_id"]
