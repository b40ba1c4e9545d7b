"""The runs of a fused array's members: one child run of the sweep's parent per member, like
a serially trained job's, plus the tags ``hpml.fused`` and ``hpml.fused.array_size``.

Every member's run is open for the whole array. MLflow's fluent API keeps one active run per
thread, so each is started to record what a run records at its start (config, tags), then set
aside as RUNNING; metrics reach it by run id (:class:`MemberLogger`), and it is reopened at the
end to record how it ended.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import mlflow
from mlflow import MlflowClient
from omegaconf import DictConfig

from hpml.hydra_job import HydraJob
from hpml.names import ARRAY_SIZE_TAG, ARRAY_TAG, FUSED_TAG, MEMBER_PREFIX, MEMBER_TAG
from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.records import log_config, log_failure, log_job_log
from hpml.tracking.run import MlflowTracker, _best_effort, sweep_record
from hpml.tracking.store import retry_locked
from hpml.tracking.tags import default_run_name, environment_tags, hydra_tags

log = logging.getLogger(__name__)
_MEMBER = re.compile(rf"^{MEMBER_PREFIX}(\d+)/(.+)$")


class MemberLogger(AttachedMLFlowLogger):
    """Member ``member``'s run: its own ``fused<member>/...`` metrics without the prefix, and
    the array's unprefixed ones (throughput, step time: what every member went through)."""

    def __init__(self, *args: Any, member: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.member = member

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        own: dict[str, float] = {}
        for name, value in metrics.items():
            match = _MEMBER.match(name)
            if match is None:
                own[name] = value
            elif int(match[1]) == self.member:
                own[match[2]] = value
        super().log_metrics(own, step)


class MemberRuns:
    """The open runs of an array's members, one per member, in member order.

    :meth:`open` starts each (or reopens the run of an earlier attempt that stopped in the same
    job folder: a sweep started again continues its stopped jobs' runs, and an array, which
    keeps no checkpoint, starts afresh inside them, saying so); :meth:`close` ends each one
    with its own status, one member's failure to close never keeping another's open.
    """

    def __init__(self, tracker: MlflowTracker, members: list[tuple[DictConfig, HydraJob]]) -> None:
        self.tracker, self.members = tracker, members
        self.ids: list[str] = []
        self.monitors: list[Any] = []

    def open(self) -> None:
        from hpml.tracking.jobs import record_run

        array = str(self.members[0][1].output_dir)
        for index, (cfg, job) in enumerate(self.members):
            earlier = self._earlier(job)
            if earlier is not None:
                print(
                    f"hpml: job {job.output_dir} starts afresh in its run {earlier}: a fused "
                    "array keeps no checkpoint",
                    flush=True,
                )
            run_id = self._start(cfg, job, index, array, earlier)
            record_run(job.output_dir, run_id)
            if self.tracker.log_system_metrics:
                try:  # as MLflow's start_run: a monitor that cannot start only warns
                    self.monitors.append(self._monitor(run_id, resumed=earlier is not None))
                except Exception as error:
                    log.warning("no system metrics for run %s: %s", run_id, error)

    def _earlier(self, job: HydraJob) -> str | None:
        """The run of an earlier attempt of this job that did not finish (its folder's record
        names it), if the store still has it: checkpoint or not, an array starts it afresh."""
        from hpml.tracking.jobs import earlier_attempt

        run_id = earlier_attempt(job.output_dir)
        if run_id is None:
            return None
        try:
            run = self.tracker.client().get_run(run_id)
        except Exception:  # gone, or another store: a new run, as a first attempt gets
            return None
        return run.info.run_id if run.info.lifecycle_stage == "active" else None

    def _start(
        self, cfg: DictConfig, job: HydraJob, index: int, array: str, earlier: str | None
    ) -> str:
        """Start member ``index``'s child run with what a serial job's run starts with, then
        set it aside, RUNNING; its id, in :attr:`ids` as soon as the run exists, so
        :meth:`close` ends it whatever fails after."""
        tracker = self.tracker
        mlflow.set_tracking_uri(tracker.tracking_uri)
        record = sweep_record(job)
        tags = {
            **environment_tags(),
            **hydra_tags(job),
            FUSED_TAG: "true",
            ARRAY_SIZE_TAG: str(len(self.members)),
            MEMBER_TAG: str(index),
            ARRAY_TAG: array,
        }
        active = retry_locked(
            lambda: mlflow.start_run(
                run_id=earlier,
                experiment_id=None if earlier else tracker.experiment_id(),
                run_name=None if earlier else tracker.run_name or default_run_name(job),
                parent_run_id=record["run_id"] if record else None,
                tags=tags,
                log_system_metrics=False,
            )
        )
        self.ids.append(active.info.run_id)
        try:
            if earlier is not None and "hpml.error" in active.data.tags:
                MlflowClient(tracker.tracking_uri).delete_tag(earlier, "hpml.error")
            log_config(cfg, job, resumed=earlier is not None)
        finally:
            mlflow.end_run("RUNNING")  # set aside, open: close() ends it
        return active.info.run_id

    def _monitor(self, run_id: str, resumed: bool) -> Any:
        """MLflow's system metrics for the member's run, as a serial run samples them (a
        reopened run's continue its steps)."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(
            run_id,
            sampling_interval=self.tracker.system_metrics_interval_s,
            resume_logging=resumed,
            tracking_uri=self.tracker.tracking_uri,
        )
        monitor.start()
        return monitor

    def close(self, status: str, exc: BaseException | None, record: Callable[[int], None]) -> None:
        """End every opened run with ``status``: ``record(index)`` (its dataset, its model,
        recorded best effort by ``record`` itself), the failure if any, the job log; each
        member on its own, errors logged."""
        for monitor in self.monitors:
            _best_effort(monitor.finish)
        for index, run_id in enumerate(self.ids):
            job = self.members[index][1]
            try:
                retry_locked(
                    lambda run_id=run_id: mlflow.start_run(run_id=run_id, log_system_metrics=False)
                )
            except Exception as error:
                log.warning("could not end member %d's run %s: %s", index, run_id, error)
                continue
            try:
                record(index)
                if exc is not None:
                    _best_effort(log_failure, exc)
                _best_effort(log_job_log, job)
            finally:
                _best_effort(mlflow.end_run, status)


def member_loggers(tracker: MlflowTracker, run_ids: list[str]) -> list[MemberLogger]:
    return [
        MemberLogger(tracking_uri=tracker.tracking_uri, run_id=run_id, member=index)
        for index, run_id in enumerate(run_ids)
    ]
