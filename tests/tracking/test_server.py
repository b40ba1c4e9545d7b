"""Runs sent to a real MLflow server over HTTP (logger.tracking_uri=http://...), on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QUICK, run_cli
from tests.servers import MlflowServer

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path, store_template: Path) -> Iterator[tuple[str, Path]]:
    """``mlflow server`` on 127.0.0.1 with its own store; its whole process group is stopped."""
    server = MlflowServer(tmp_path, store_template)
    try:
        server.start(timeout_s=120)
        yield server.uri, tmp_path
    finally:
        server.stop()


def test_run_goes_to_the_server_with_metrics_and_artifacts(server, root):
    uri, server_dir = server
    result = run_cli(["model=vae", *QUICK, f"logger.tracking_uri={uri}"], root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"hpml: compare runs at {uri}/#/experiments/" in result.stdout  # the server's own UI
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert "train/throughput_samples_per_s" in runs[0].data.metrics
    assert runs[0].data.params["logger.tracking_uri"] == uri
    assert [a.path for a in client.list_artifacts(runs[0].info.run_id, "model")] == [
        "model/architecture.txt"
    ]
    assert list((server_dir / "artifacts").rglob("architecture.txt"))  # stored by server
    local = MlflowClient(f"sqlite:///{root}/mlflow.db")
    assert local.get_experiment_by_name("hpml") is None  # nothing went to the local store
