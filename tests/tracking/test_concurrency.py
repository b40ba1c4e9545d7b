"""Sweeps started at once on a fresh local store: every run is recorded under its own parent."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from tests.conftest import QUICK, run_cli

pytestmark = pytest.mark.slow

SWEEPS = 3
SEEDS = "1"  # jobs per sweep: the race is in creating the store, before any job


def test_sweeps_racing_to_create_a_fresh_store_lose_no_run(tmp_path: Path):
    from mlflow import MlflowClient

    store = tmp_path / "fresh" / "mlflow.db"  # does not exist yet: every sweep races to make it
    args = [
        "-m",
        "model=vae",
        *QUICK,
        f"seed={SEEDS}",
        "test=false",
        "callbacks.perf.measured_peak=false",
        f"logger.tracking_uri=sqlite:///{store}",
    ]
    with concurrent.futures.ThreadPoolExecutor(SWEEPS) as pool:
        results = list(pool.map(lambda _: run_cli(args, tmp_path), range(SWEEPS)))
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]

    client = MlflowClient(f"sqlite:///{store}")
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    jobs = len(SEEDS.split(","))
    assert len(runs) == SWEEPS * (1 + jobs)  # 6 for 3 sweeps of 1 job
    parents = {r.info.run_id: r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"}
    assert len(parents) == SWEEPS
    children = [r for r in runs if r.info.run_id not in parents]
    assert all(r.info.status == "FINISHED" for r in runs)
    for parent_id, parent in parents.items():
        mine = [c for c in children if c.data.tags.get("mlflow.parentRunId") == parent_id]
        assert sorted(c.data.params["seed"] for c in mine) == SEEDS.split(",")
        assert {c.data.tags["hpml.sweep_dir"] for c in mine} == {parent.data.tags["hpml.sweep_dir"]}
