"""The runs of a fused array's members: one child run of the sweep's parent per member, like
a serially trained job's, plus the tags ``hpml.fused`` and ``hpml.fused.array_size``.

Every member's run is open for the whole array. MLflow's fluent API keeps one active run per
thread, so each is started to record what a run records at its start (config, tags), then set
aside as RUNNING; metrics reach it by run id (:class:`MemberLogger`), and it is reopened at the
end to record how it ended.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import mlflow
from omegaconf import DictConfig

from hpml.hydra_job import HydraJob
from hpml.names import MEMBER_PREFIX
from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.records import log_config, log_failure, log_job_log
from hpml.tracking.run import MlflowTracker, _best_effort, sweep_record
from hpml.tracking.store import retry_locked
from hpml.tracking.tags import default_run_name, environment_tags, hydra_tags

FUSED_TAG = "hpml.fused"
ARRAY_SIZE_TAG = "hpml.fused.array_size"
MEMBER_TAG = "hpml.fused.member"
ARRAY_TAG = "hpml.fused.array"  # the leader's job folder: members of one array share it

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


def open_member(
    tracker: MlflowTracker, cfg: DictConfig, job: HydraJob, size: int, index: int, array: str
) -> str:
    """Start member ``index``'s child run with what a serial job's run starts with; its id."""
    mlflow.set_tracking_uri(tracker.tracking_uri)
    record = sweep_record(job)
    tags = {
        **environment_tags(),
        **hydra_tags(job),
        FUSED_TAG: "true",
        ARRAY_SIZE_TAG: str(size),
        MEMBER_TAG: str(index),
        ARRAY_TAG: array,
    }
    active = retry_locked(
        lambda: mlflow.start_run(
            experiment_id=tracker.experiment_id(),
            run_name=tracker.run_name or default_run_name(job),
            parent_run_id=record["run_id"] if record else None,
            tags=tags,
            log_system_metrics=False,
        )
    )
    try:
        log_config(cfg, job)
    finally:
        mlflow.end_run("RUNNING")  # set aside, open: close_member ends it
    return active.info.run_id


def close_member(
    run_id: str,
    job: HydraJob,
    exc: BaseException | None,
    record: Callable[[], None] = lambda: None,
) -> None:
    """End member run ``run_id``: ``record`` (its dataset, say), the failure if any, the job log."""
    mlflow.start_run(run_id=run_id, log_system_metrics=False)
    try:
        _best_effort(record)
        if exc is not None:
            _best_effort(log_failure, exc)
        _best_effort(log_job_log, job)
    finally:
        mlflow.end_run("FINISHED" if exc is None else "FAILED")


def member_loggers(tracker: MlflowTracker, run_ids: list[str]) -> list[MemberLogger]:
    return [
        MemberLogger(tracking_uri=tracker.tracking_uri, run_id=run_id, member=index)
        for index, run_id in enumerate(run_ids)
    ]
