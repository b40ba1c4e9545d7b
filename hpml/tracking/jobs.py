"""A job's verdict on disk, beside its outputs: how a sweep counts failures from any process,
even of a job that died before it had an MLflow run."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

JOB_FILE = "hpml_job.json"
PARENT_FILE = "mlflow_parent_run.json"  # in the sweep dir: the parent run its jobs log under


def this_process() -> str:
    """``host:pid`` of this process: whether a job runs in its sweep's own process (basic
    launcher), and whether a RUNNING run's checkpoint writer is still alive."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _read(job_dir: Path) -> dict:
    path = job_dir / JOB_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _write(job_dir: Path, record: dict) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / JOB_FILE).write_text(json.dumps(record))


def record_run(job_dir: Path, run_id: str) -> None:
    """Note the MLflow run the job in ``job_dir`` trains in, while it trains, so a requeued
    attempt of the same job (same folder) can find it."""
    _write(job_dir, {"status": "RUNNING", "error": None, "run_id": run_id})


def write_job_status(job_dir: Path, failed: bool, error: str | None = None) -> None:
    """Record whether the job in ``job_dir`` failed (and why) for its sweep to count."""
    record = _read(job_dir) | {"status": "FAILED" if failed else "FINISHED", "error": error}
    _write(job_dir, record)


def earlier_attempt(job_dir: Path) -> str | None:
    """The run of an earlier attempt of this job in ``job_dir`` that did not finish (a job
    requeued after preemption or its time limit), or None."""
    record = _read(job_dir)
    return record.get("run_id") if record.get("status") != "FINISHED" else None


def failed_jobs(sweep_dir: Path) -> list[str]:
    """Job folders of the sweep that failed, or that started (``.hydra`` exists) but never ended."""
    job_dirs = sorted(p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir())
    return [job_dir.name for job_dir in job_dirs if _read(job_dir).get("status") != "FINISHED"]
