"""Stopped by SIGTERM or Ctrl-C, continued with ``resume=``: one MLflow run, every epoch once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import QUICK, QUICK_BATCH, QUICK_SAMPLES, run_cli, start_cli

pytestmark = pytest.mark.slow

EPOCHS = 4
STEPS_PER_EPOCH = QUICK_SAMPLES // QUICK_BATCH
SLOW = ["+callbacks.slow._target_=tests.helpers.SlowBatches", "+callbacks.slow.seconds=0.25"]
# Logged more than once per step by design: Lightning adds `epoch` to each logging call.
# a run's noise figures are its figures so far: logged when fit ends and again when test ends
MULTI_POINT = {"epoch", "noise/other_cpu_pct", "noise/steal_pct", "noise/step_time_cv_pct"}


def stop_after_a_checkpoint(
    proc: Any, root: Path, signum: int, seen: set[Path]
) -> tuple[int, list[str]]:
    """Send ``signum`` once a last.ckpt not in ``seen`` appears; the exit code and hpml lines.

    The signal goes to the process group, DataLoader workers included, as SLURM and Ctrl-C send it.
    """
    deadline = time.monotonic() + 120
    while not set(root.glob("outputs/*/*/checkpoints/last.ckpt")) - seen:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.1)
    os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, [line for line in err.splitlines() if line.startswith("hpml:")]


def test_stopped_run_resumes_into_the_same_run_with_every_epoch_once(root, client):
    first = start_cli(
        ["model=vae", *QUICK, f"trainer.max_epochs={EPOCHS}", "data.num_workers=1", *SLOW], root
    )
    code, lines = stop_after_a_checkpoint(first, root, signal.SIGTERM, set())
    assert code == 128 + signal.SIGTERM
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert len(runs) == 1
    run_id = runs[0].info.run_id
    assert lines == [line for line in lines if "stopped by SIGTERM" in line] and len(lines) == 1
    assert f"resume={run_id}" in lines[0]
    run = client.get_run(run_id)
    assert run.info.status == "KILLED"
    logged = {a.path for a in client.list_artifacts(run_id, "checkpoints")}
    assert logged == {"checkpoints/last.ckpt", "checkpoints/best.ckpt"}
    assert Path(run.data.tags["hpml.checkpoint.last"]).is_file()
    epochs_before = len(client.get_metric_history(run_id, "train/loss"))
    assert 1 <= epochs_before < EPOCHS

    # resume by id: the run's own overrides come back; Ctrl-C stops it again
    seen = set(root.glob("outputs/*/*/checkpoints/last.ckpt"))
    code, lines = stop_after_a_checkpoint(
        start_cli([f"resume={run_id}"], root), root, signal.SIGINT, seen
    )
    assert code == 128 + signal.SIGINT
    assert len(lines) == 1 and f"run {run_id} stopped by SIGINT" in lines[0], lines
    assert client.get_run(run_id).info.status == "KILLED"

    # resume=last finds it; a given override (no slowdown) wins over the recorded one
    result = run_cli(["resume=last", "+callbacks.slow.seconds=0"], root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"hpml: run {run_id} finished" in result.stdout
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert "hpml.error" not in run.data.tags

    history = sorted(client.get_metric_history(run_id, "train/loss"), key=lambda m: m.step)
    print(
        "train/loss of the resumed run (epoch, step, value):",
        [(i, m.step, round(m.value, 3)) for i, m in enumerate(history)],
    )
    assert [m.step for m in history] == [(e + 1) * STEPS_PER_EPOCH - 1 for e in range(EPOCHS)]
    epochs = sorted({m.value for m in client.get_metric_history(run_id, "epoch")})
    assert epochs[:EPOCHS] == list(range(EPOCHS))
    for name in set(run.data.metrics) - MULTI_POINT:  # no step twice, for any metric
        steps = [m.step for m in client.get_metric_history(run_id, name)]
        assert len(steps) == len(set(steps)), (name, steps)
    assert len(client.get_metric_history(run_id, "val/loss")) == EPOCHS
    assert "test/loss" in run.data.metrics


def test_unknown_resume_value_is_one_line_naming_it(root):
    result = run_cli(["resume=0123abcd"], root)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "hpml: error: resume=0123abcd: no such run in "
        f"sqlite:///{root}/mlflow.db; no run of this experiment has a checkpoint to resume from"
    ]


def test_a_requeued_sweep_job_continues_its_own_run(root, client):
    # what submitit does after preemption or a time limit: the same job, in the same folder
    sweep_dir = root / "multirun" / "requeued"
    args = ["-m", f"hydra.sweep.dir={sweep_dir}", "model=vae", *QUICK, *SLOW]
    args += [f"trainer.max_epochs={EPOCHS}", "data.num_workers=1", "seed=7"]
    first = start_cli(args, root)
    deadline = time.monotonic() + 120
    while not (sweep_dir / "0" / "checkpoints" / "last.ckpt").is_file():
        assert first.poll() is None, first.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGTERM)
    first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM
    (child,) = client.search_runs(
        [client.get_experiment_by_name("hpml").experiment_id], "tags.hpml.job_num = '0'"
    )
    assert child.info.status == "KILLED"

    again = run_cli(args, root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "starts afresh" not in again.stderr
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    children = [r for r in runs if r.data.tags.get("hpml.sweep_parent") != "true"]
    assert [r.info.run_id for r in children] == [child.info.run_id]
    assert children[0].info.status == "FINISHED"
    assert children[0].data.tags["mlflow.parentRunId"] == child.data.tags["mlflow.parentRunId"]
    assert len([r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]) == 1
    steps = [m.step for m in client.get_metric_history(child.info.run_id, "train/loss")]
    assert sorted(steps) == [(e + 1) * STEPS_PER_EPOCH - 1 for e in range(EPOCHS)]
    assert "1 run, 0 failed" in again.stderr
