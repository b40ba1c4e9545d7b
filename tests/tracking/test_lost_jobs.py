"""No job is lost: failures before a run exists are recorded, sweeps with failures exit non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpml.tracking.jobs import JOB_FILE, failed_jobs, write_job_status
from tests.conftest import QUICK, run_cli, stderr_lines

pytestmark = pytest.mark.slow


def test_job_failing_before_its_run_exists_is_a_failed_child(root, client):
    # The second job's experiment name is invalid: its own run cannot start, so hpml records a
    # FAILED run for it under the sweep's parent, in the parent's experiment.
    result = run_cli(
        ["-m", "model=vae", *QUICK, "test=false", "logger.experiment_name=hpml,''"], root
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    parent = next(r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true")
    children = sorted(
        (r for r in runs if r.data.tags.get("mlflow.parentRunId")),
        key=lambda r: r.data.tags["hpml.job_num"],
    )
    assert [c.info.status for c in children] == ["FINISHED", "FAILED"]
    assert parent.info.status == "FAILED"
    lost = children[1]
    assert lost.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert "experiment" in lost.data.tags["hpml.error"].lower()
    assert lost.data.params["logger.experiment_name"] == ""
    arts = {a.path for a in client.list_artifacts(lost.info.run_id, "logs")}
    assert arts == {"logs/train.log"}
    assert f"{len(children)} runs, 1 failed" in result.stderr


def test_sweep_whose_parent_cannot_be_created_starts_no_job(tmp_path: Path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the store's folder should be")
    result = run_cli(
        [
            "-m",
            "model=vae",
            *QUICK,
            "seed=1,2",
            f"logger.tracking_uri=sqlite:///{blocker}/mlflow.db",
        ],
        tmp_path,
    )
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr[-3000:]
    assert "parent run could not be created, no job was started" in lines[0]
    assert str(blocker) in lines[0]
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "multirun").rglob(".hydra"))  # no job ever started


def test_sweep_counts_jobs_that_never_reported(tmp_path: Path):
    for name, status in (("0", False), ("1", True), ("2", None)):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        if status is not None:
            write_job_status(tmp_path / name, failed=status, error="boom" if status else None)
    (tmp_path / "notes").mkdir()  # not a job folder
    assert failed_jobs(tmp_path) == ["1", "2"]  # "2" started and never wrote its verdict
    assert json.loads((tmp_path / "1" / JOB_FILE).read_text()) == {
        "status": "FAILED",
        "error": "boom",
    }
