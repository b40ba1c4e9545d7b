"""A job's verdict on disk, beside its outputs: how a sweep counts failures from any process.

Under joblib or submitit, jobs run in other processes (or machines) than the sweep's callback,
and a job may die before it has an MLflow run; a small file in each job's folder survives both.
"""

from __future__ import annotations

import json
from pathlib import Path

JOB_FILE = "hpml_job.json"
PARENT_FILE = "mlflow_parent_run.json"  # in the sweep dir: the parent run its jobs log under


def write_job_status(job_dir: Path, failed: bool, error: str | None = None) -> None:
    """Record whether the job in ``job_dir`` failed (and why) for its sweep to count."""
    job_dir.mkdir(parents=True, exist_ok=True)
    record = {"status": "FAILED" if failed else "FINISHED", "error": error}
    (job_dir / JOB_FILE).write_text(json.dumps(record))


def failed_jobs(sweep_dir: Path) -> list[str]:
    """Job folders of the sweep that failed, or that started (``.hydra`` exists) but never ended."""
    failed = []
    for job_dir in sorted(p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()):
        path = job_dir / JOB_FILE
        if not path.is_file() or json.loads(path.read_text())["status"] != "FINISHED":
            failed.append(job_dir.name)
    return failed
