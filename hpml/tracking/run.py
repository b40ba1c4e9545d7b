"""One MLflow run per job, started by hpml so system metrics, params and failures all land in it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import mlflow
from mlflow import MlflowClient
from omegaconf import DictConfig

from hpml.errors import one_line
from hpml.hydra_job import HydraJob
from hpml.names import ERROR_TAG
from hpml.ranges import Positive, Range
from hpml.tracking.interrupts import interrupted
from hpml.tracking.jobs import PARENT_FILE
from hpml.tracking.logger import AttachedMLFlowLogger, Select
from hpml.tracking.records import log_config, log_failure, log_job_log
from hpml.tracking.redact import redact_text
from hpml.tracking.refused import refused_mid_run, write_refused
from hpml.tracking.remote import PREFLIGHT_TIMEOUT_S
from hpml.tracking.retries import RETRY_S, fail_fast_if_server_gone
from hpml.tracking.store import StoreError, experiment_id, prepare_store, retry_locked
from hpml.tracking.tags import default_run_name, environment_tags, fitted_run_name, hydra_tags
from hpml.tracking.tracked import TrackedRun, best_effort

log = logging.getLogger(__name__)
# MLflow announces every start and stop of its system-metrics thread at INFO: noise on every run.
logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)


JobConfig = tuple[DictConfig, HydraJob | None]  # a job's composed config and Hydra's job
Record = Callable[[TrackedRun, bool], None]


class MlflowTracker:
    """Opens, records and closes MLflow runs for hpml jobs (config group ``logger``): the one
    door to MLflow of a job in progress. A run that raises ends FAILED with what it logged, the
    error as a tag and the traceback and job log as artifacts.

    Args:
        tracking_uri: a local SQLite store (the default) or an MLflow server.
        experiment_name: the experiment runs go to.
        artifact_root: where a new experiment's artifacts go (next to a local store).
        run_name: every run's name; None: ``model/data``, plus a sweep job's overrides.
        log_system_metrics: sample MLflow's system metrics every ``system_metrics_interval_s``.
        retry_s: how long a request to a server that went away is retried.
        preflight_timeout_s: the bound of the one request that checks a server first.
        checkpoint_max_bytes: larger checkpoints stay on disk only.
        log_model: log the trained net as an MLflow model at the end of the run.
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: str = "hpml",
        artifact_root: str | None = None,
        run_name: str | None = None,
        log_system_metrics: bool = True,
        system_metrics_interval_s: Positive = 5.0,
        retry_s: float | None = RETRY_S,
        preflight_timeout_s: float = PREFLIGHT_TIMEOUT_S,
        checkpoint_max_bytes: Annotated[
            int | None, Range(ge=0, null="no cap", note="0: never uploaded")
        ] = 200_000_000,
        log_model: bool = False,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.retry_s = retry_s
        self.preflight_timeout_s = preflight_timeout_s
        self.experiment_name = experiment_name
        self.artifact_root = artifact_root
        self.run_name = run_name
        self.log_system_metrics = log_system_metrics
        self.system_metrics_interval_s = system_metrics_interval_s
        self.checkpoint_max_bytes = checkpoint_max_bytes
        self.log_model = log_model

    def client(self) -> MlflowClient:
        """A client of the store, which is created first if it is a new local file."""
        prepare_store(self.tracking_uri)
        return MlflowClient(self.tracking_uri)

    def experiment_id(self) -> str:
        return experiment_id(self.client(), self.experiment_name, self.artifact_root)

    def attached_logger(
        self, run_id: str | None, select: Select | None = None
    ) -> AttachedMLFlowLogger:
        """A Lightning logger writing into run ``run_id`` the metrics ``select`` picks (None:
        all). A DDP rank other than zero gets one too, with its rank's no-op writes: Lightning
        expects the same loggers on every rank."""
        return AttachedMLFlowLogger(
            tracking_uri=self.tracking_uri,
            run_id=run_id,
            checkpoint_max_bytes=self.checkpoint_max_bytes,
            select=select,
        )

    @contextmanager
    def runs(
        self,
        members: Sequence[JobConfig],
        resume: Sequence[str | None],
        tags: Sequence[dict[str, str]],
        record: Record,
    ) -> Iterator[list[TrackedRun]]:
        """One run per member, each a child of its sweep's parent if any, open while the job
        trains; each ends FINISHED, FAILED or KILLED, one's failure to close never keeping
        another open.

        Args:
            resume: per member, the id of a stopped run to reopen instead of a fresh one.
            tags: per member, tags beyond the environment's and Hydra's.
            record: ``record(run, trained)`` logs what a run made as it ends.
        """
        mlflow.set_tracking_uri(self.tracking_uri)
        aside = len(members) > 1
        if self.log_system_metrics and not aside:
            from mlflow.system_metrics import (
                set_system_metrics_samples_before_logging,
                set_system_metrics_sampling_interval,
            )

            set_system_metrics_sampling_interval(self.system_metrics_interval_s)
            set_system_metrics_samples_before_logging(1)
        opened: list[TrackedRun] = []
        monitors: list[Any] = []
        status, error = "FINISHED", None
        try:
            for index, (cfg, job) in enumerate(members):
                run = self._start(cfg, job, resume[index], tags[index], index if aside else None)
                opened.append(run)
                self._begin(run, cfg, resumed=resume[index] is not None)
                if aside and self.log_system_metrics:
                    try:  # as MLflow's start_run: a monitor that cannot start only warns
                        monitors.append(self._monitor(run.run_id, resume[index] is not None))
                    except Exception as exc:
                        log.warning("no system metrics for run %s: %s", run.run_id, exc)
            yield opened
        except BaseException as exc:
            status = "KILLED" if interrupted(exc) else "FAILED"
            fail_fast_if_server_gone(exc)  # retried for logger.retry_s already: once is enough
            if write_refused(exc):  # what the runs would still record is refused too
                refused, opened = opened, []
                uri, name = self.tracking_uri, self.experiment_name
                raise refused_mid_run(exc, refused, uri, name) from exc
            error = exc
            raise
        finally:  # each run ends, or the next job in this process could not start one
            for monitor in monitors:
                best_effort("the system metrics", monitor.finish)
            for run in opened:
                self._end(run, status, error, record)

    def _start(
        self,
        cfg: DictConfig,
        job: HydraJob | None,
        resume: str | None,
        tags: dict[str, str],
        member: int | None,
    ) -> TrackedRun:
        """Start (or reopen) a job's run under its sweep's parent; one that cannot start is
        recorded as a FAILED run, if the store works."""
        run_name, tags = self._named(job, tags)
        try:
            record = sweep_record(job)
            active = retry_locked(
                lambda: mlflow.start_run(
                    run_id=resume,
                    experiment_id=None if resume else self.experiment_id(),
                    run_name=None if resume else run_name,
                    parent_run_id=record["run_id"] if record else None,
                    tags=tags,
                    log_system_metrics=self.log_system_metrics and member is None,
                )
            )
        except Exception as exc:
            fail_fast_if_server_gone(exc)
            if write_refused(exc):  # recording the failed run would be refused as well
                raise refused_mid_run(exc, [], self.tracking_uri, self.experiment_name) from exc
            if not isinstance(exc, StoreError):
                best_effort("the failed run", self._record_unstarted, cfg, job, run_name, tags, exc)
            raise
        return TrackedRun(active, job, member, self)

    def _begin(self, run: TrackedRun, cfg: DictConfig, resumed: bool) -> None:
        """What a run records as it starts: the config (a reopened run's error tag cleared:
        the stop it recorded is over); a member's run is then set aside, RUNNING."""
        try:
            if resumed and ERROR_TAG in mlflow.get_run(run.run_id).data.tags:
                MlflowClient(self.tracking_uri).delete_tag(run.run_id, ERROR_TAG)
            log_config(cfg, run.job, resumed=resumed)
        finally:
            if run.aside:
                mlflow.end_run("RUNNING")  # set aside, open: _end ends it

    def _monitor(self, run_id: str, resumed: bool) -> Any:
        """MLflow's system metrics for a run set aside, as an active run samples them."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(
            run_id,
            sampling_interval=self.system_metrics_interval_s,
            resume_logging=resumed,
            tracking_uri=self.tracking_uri,
        )
        monitor.start()
        return monitor

    def _end(
        self, run: TrackedRun, status: str, error: BaseException | None, record: Record
    ) -> None:
        """End ``run`` with ``status``: ``record`` (best effort by itself), the failure, the
        job's log; a run set aside is reopened first."""
        if run.aside:
            try:
                retry_locked(lambda: mlflow.start_run(run_id=run.run_id, log_system_metrics=False))
            except Exception as exc:
                log.warning("could not end member %s's run %s: %s", run.member, run.run_id, exc)
                return
        try:
            record(run, status == "FINISHED")
            if error is not None:
                best_effort("the error", log_failure, error)
            best_effort("the job log", log_job_log, run.job)
        finally:
            best_effort(f"the run's end ({status})", mlflow.end_run, status)

    def record_refused(self, cfg: DictConfig, job: HydraJob | None, exc: BaseException) -> None:
        """A job of a sweep its config refused, as a FAILED child of the sweep, so the sweep's
        page lists every job. Outside a sweep the one line on the terminal is all."""
        if job is not None and job.sweep is not None:  # record_failed reads its record
            self.record_failed(cfg, job, exc)

    def record_failed(self, cfg: DictConfig, job: HydraJob | None, exc: BaseException) -> None:
        """A job that failed before its run opened (its data unreadable, say), as a FAILED run
        with its config, the error and its log; in a sweep, a child of the sweep."""
        if isinstance(exc, StoreError) or (
            job is not None and job.sweep is not None and _sweep_record_or_none(job) is None
        ):
            return
        mlflow.set_tracking_uri(self.tracking_uri)
        best_effort("the refused run", self._record_unstarted, cfg, job, *self._named(job, {}), exc)

    def _named(self, job: HydraJob | None, tags: dict[str, str]) -> tuple[str, dict[str, str]]:
        """A job's run name, and its tags: the environment's, Hydra's, then ``tags``."""
        tags = {**environment_tags(), **hydra_tags(job), **tags}
        return fitted_run_name(self.run_name) if self.run_name else default_run_name(job), tags

    def _record_unstarted(
        self,
        cfg: DictConfig,
        job: HydraJob | None,
        run_name: str,
        tags: dict[str, str],
        exc: BaseException,
    ) -> None:
        """A FAILED run for a job whose own run could not start; in a sweep under the parent,
        in the parent's experiment (the job's own may be what failed)."""
        client = self.client()
        record = _sweep_record_or_none(job)
        parent = {"mlflow.parentRunId": record["run_id"]} if record else {}
        run = client.create_run(
            record["experiment_id"] if record else self.experiment_id(),
            run_name=run_name,
            tags={**tags, **parent, ERROR_TAG: redact_text(one_line(exc))[:5000]},
        )
        mlflow.start_run(run_id=run.info.run_id, log_system_metrics=False)
        try:
            best_effort("the config", log_config, cfg, job)
            best_effort("the error", log_failure, exc)
            best_effort("the job log", log_job_log, job)
        finally:
            mlflow.end_run("FAILED")


def sweep_record(job: HydraJob | None) -> dict[str, str] | None:
    """The sweep's parent run (``run_id``, ``experiment_id``) from the sweep dir; None outside
    a sweep. A sweep job without it fails rather than log a stray top-level run."""
    if job is None or job.sweep is None:
        return None
    path = Path(job.sweep.dir) / PARENT_FILE
    if not path.is_file():
        raise StoreError(
            f"no sweep parent run recorded at {path}: the sweep callback "
            "(hydra.callbacks.mlflow_sweep) must stay enabled for multiruns"
        )
    return json.loads(path.read_text())


def _sweep_record_or_none(job: HydraJob | None) -> dict[str, str] | None:
    try:
        return sweep_record(job)
    except StoreError:
        return None
