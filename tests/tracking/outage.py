"""A run held at a known epoch while a test takes its tracking server down or changes what the
server lets it do, and the check that a server restarted mid-run cost no metric."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import QUICK, start_cli
from tests.servers import MlflowServer

# what a run that lost no metric has, one value per epoch each
PER_EPOCH = ("train/loss", "val/loss", "val/kld", "train/epoch_time_s", "machine/load_avg_1m_procs")


def wait_for(path: Path, proc: Any, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"training ended before {path.name}: {err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"training did not reach {path} in {timeout_s} s")
        time.sleep(0.2)


def start_gated_run(args: list[str], root: Path, gate: Path) -> Any:
    """``python -m hpml.train ARGS`` in the background, held at the start of epoch 1 until
    ``gate/go`` exists (tests.helpers.WaitAtEpoch)."""
    gated = ["+callbacks.gate._target_=tests.helpers.WaitAtEpoch", "+callbacks.gate.epoch=1"]
    return start_cli(["model=vae", *QUICK, *args, *gated, f"+callbacks.gate.gate_dir={gate}"], root)


def finish(proc: Any, timeout_s: float) -> tuple[str, str]:
    """The run's stdout and stderr once it ends; killed if it outlives ``timeout_s``."""
    try:
        return proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def restart_mid_run(
    server: MlflowServer, root: Path, gate: Path, experiment: str, epochs: int = 3
) -> tuple[Any, str, str, str, int]:
    """A run of ``epochs`` epochs into ``server``, which is stopped once epoch 0 has landed and
    launched again as epoch 1 begins logging into nothing: the new process answers only once it
    has imported MLflow, seconds after the run's first refused request, and so can answer the
    run's retry 6 s after it (hpml.tracking.retries), where a server launched only once the run
    was refused met the next one, 8 s later. Returns the finished process, its stdout and
    stderr, the run's id, and when the server went down (ms since the epoch)."""
    from mlflow import MlflowClient

    proc = start_gated_run(
        [
            f"trainer.max_epochs={epochs}",
            f"logger.experiment_name={experiment}",
            f"logger.tracking_uri={server.uri}",
        ],
        root,
        gate,
    )
    try:
        wait_for(gate / "reached", proc)  # epoch 0 is logged; epoch 1 waits for the gate
        client = MlflowClient(server.uri)
        [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
        run_id = run.info.run_id
        assert len(client.get_metric_history(run_id, "train/loss")) == 1  # epoch 0 has landed
        server.stop()
        down_ms = int(time.time() * 1000)
        server.launch()  # same port, same store; seconds until it answers again
        (gate / "go").touch()  # epochs 1.. now log into a server that is not there yet
        server.wait_until_answering()
    except BaseException:
        finish(proc, 0.1)
        raise
    out, err = finish(proc, 600)
    return proc, out, err, run_id, down_ms


def assert_no_metric_lost(
    server: MlflowServer, restarted: tuple[Any, str, str, str, int], epochs: int = 3
) -> list[Any]:
    """The run of :func:`restart_mid_run` ended FINISHED with every epoch's metrics; its
    ``train/loss`` history, by step."""
    from mlflow import MlflowClient

    proc, out, err, run_id, down_ms = restarted
    assert proc.returncode == 0, err[-3000:]
    assert "hpml: error" not in err and "Traceback" not in err
    # MLflow's system-metrics thread says this, and stops, when a request fails for good
    assert "Failed to log system metrics" not in out + err
    assert "Failed to get mlflow run" not in out + err
    client = MlflowClient(server.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    for name in PER_EPOCH:
        history = sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)
        steps = [m.step for m in history]
        assert len(history) == epochs and len(set(steps)) == epochs, (name, steps)
    losses = sorted(client.get_metric_history(run_id, "train/loss"), key=lambda m: m.step)
    assert losses[1].timestamp >= down_ms  # logged while the server was down, landed after
    assert "test/loss" in run.data.metrics
    assert "system/cpu_utilization_percentage" in run.data.metrics
    return losses
