"""Runs sent to a real MLflow server over HTTP (logger.tracking_uri=http://...), on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import QUICK, run_cli

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path, store_template: Path):
    """``mlflow server`` on 127.0.0.1 with its own store; its whole process group is stopped."""
    shutil.copy(store_template, tmp_path / "server.db")
    port = free_port()
    mlflow_cli = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen(
        [str(mlflow_cli), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not answer on {uri}")
            time.sleep(0.5)
        yield uri, tmp_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_run_goes_to_the_server_with_metrics_and_artifacts(server, root):
    uri, server_dir = server
    result = run_cli(["model=vae", *QUICK, f"logger.tracking_uri={uri}"], root)
    assert result.returncode == 0, result.stderr[-3000:]
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert "train/throughput_samples_per_s" in runs[0].data.metrics
    assert runs[0].data.params["logger.tracking_uri"] == uri
    assert [a.path for a in client.list_artifacts(runs[0].info.run_id, "model")] == \
        ["model/architecture.txt"]
    assert list((server_dir / "server-artifacts").rglob("architecture.txt"))  # stored by server
    local = MlflowClient(f"sqlite:///{root}/mlflow.db")
    assert local.get_experiment_by_name("hpml") is None  # nothing went to the local store
