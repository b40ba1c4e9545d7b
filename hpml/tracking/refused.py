"""A write the tracking server refuses once a run is under way (its permission on the experiment
withdrawn): the job stops in one line that says what became of its MLflow run, which the server
may no longer let it end.

Everything else the run would still record (its failure, its job log, its dataset) would be
refused the same way, each a line of its own: none of it is tried.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from hpml.errors import causes
from hpml.tracking.redact import redact_text
from hpml.tracking.store import StoreError

trace = logging.getLogger("hpml.trace")  # to the job log file only (conf/hydra/default.yaml)
# MLflow's system-metrics thread says, and stops, when its own write is refused
SYSTEM_METRICS_LOGGER = "mlflow.system_metrics.system_metrics_monitor"
REFUSED_MARKS = ("error code 403", "PERMISSION_DENIED", "403 Client Error")


class WriteRefusedError(StoreError):
    """The tracking server refused this client a write its run needed."""


class Run(Protocol):
    """What is ended of a run (``TrackedRun``)."""

    run_id: str
    aside: bool


def write_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing a write (HTTP 403), however MLflow wrapped it: a
    REST call's ``PERMISSION_DENIED``, or an artifact upload's ``HTTPError``."""
    for error in causes(exc):
        if getattr(error, "error_code", None) == "PERMISSION_DENIED":
            return True
        if getattr(getattr(error, "response", None), "status_code", None) == 403:
            return True
    return False


class RefusedWriteFilter(logging.Filter):
    """Drops MLflow's own report of a refused write: the run's one line says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(mark in message for mark in REFUSED_MARKS)


def quiet_refused_writes() -> None:
    """Put a :class:`RefusedWriteFilter` on MLflow's system-metrics logger (once)."""
    logger = logging.getLogger(SYSTEM_METRICS_LOGGER)
    if not any(isinstance(f, RefusedWriteFilter) for f in logger.filters):
        logger.addFilter(RefusedWriteFilter())


def end_refused(run: Run, tracking_uri: str) -> bool:
    """Try once to end ``run`` FAILED, saying nothing on the terminal; whether it ended. MLflow's
    own end stops the run's system metrics only once the server took the end: stopped here
    either way."""
    import mlflow
    from mlflow.tracking.fluent import run_id_to_system_metrics_monitor

    try:
        if run.aside:
            mlflow.MlflowClient(tracking_uri).set_terminated(run.run_id, "FAILED")
        else:
            mlflow.end_run("FAILED")
        return True
    except Exception:
        trace.warning("could not end run %s after a refused write", run.run_id, exc_info=True)
        return False
    finally:
        monitor = run_id_to_system_metrics_monitor.pop(run.run_id, None)
        if monitor is not None:
            monitor.finish()


def refused_mid_run(
    exc: BaseException, runs: Sequence[Run], tracking_uri: str, experiment_name: str
) -> WriteRefusedError:
    """End ``runs`` as far as the server lets them end; the one line for the refusal ``exc``."""
    from mlflow.utils.credentials import get_default_host_creds

    username = get_default_host_creds(tracking_uri).username
    who = f"user {username!r}" if username else "this client"
    where = f"tracking server {redact_text(tracking_uri)} refused {who} a write"
    if not runs:
        return WriteRefusedError(
            f"{where} to experiment {experiment_name!r} (HTTP 403) before its run started, so "
            "no run was left; ask someone with MANAGE on it to grant EDIT "
            "(python -m hpml.tracking.users), or set logger.experiment_name"
        )
    ended = {run.run_id: end_refused(run, tracking_uri) for run in runs}
    ids = ", ".join(ended)
    if all(ended.values()):
        fate = f"run {ids} ended FAILED"
    else:
        left = ", ".join(run_id for run_id, done in ended.items() if not done)
        fate = (
            f"run {left} stays RUNNING there, as the server no longer lets {who} end it: "
            f"someone with EDIT on the experiment can end it, or, with EDIT granted again, "
            f"continue it by the same command with resume={left.split(', ')[0]}"
        )
    return WriteRefusedError(
        f"{where} to run {ids} of experiment {experiment_name!r} mid-run (HTTP 403): its "
        f"permission there was withdrawn; the {fate}"
    )
