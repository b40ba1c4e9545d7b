"""``fuse=array`` sweeps as users run them: what fuses, what runs one by one and why, and what
MLflow and each job's folder record of a fused array that finished or failed."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.conftest import QUICK, run_cli, stderr_lines

pytestmark = pytest.mark.slow

# A small LSTM on short synthetic texts: no dropout and each job's seeded data order make its
# training deterministic, so a fused member's numbers can equal its serial job's. The
# accelerator is pinned so "on CPU" holds on a machine with a GPU too.
LSTM = [
    "-m",
    "model=lstm",
    *QUICK,
    "data.seq_len=16",
    "model.net.embedding_dim=16",
    "trainer.accelerator=cpu",
]
FUSED = ["fuse=array", "fuse.force=true"]
LRS = "model.optimizer.lr=0.1,0.01"


def sweep_runs(client: MlflowClient) -> tuple[object, list]:
    """The sweep's parent run and its children."""
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    parents = [r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]
    assert len(parents) == 1, [r.data.tags for r in runs]
    children = [r for r in runs if r is not parents[0]]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    return parents[0], children


def fuse_lines(result) -> list[str]:
    """What the fused launcher printed about its plan."""
    return [line for line in result.stdout.splitlines() if line.startswith("hpml: fuse=array")]


def job_dir(run) -> Path:
    return Path(run.data.tags["hpml.sweep_dir"]) / run.data.tags["hpml.job_num"]


def by_lr(children: list) -> dict[str, object]:
    return {r.data.params["model.optimizer.lr"]: r for r in children}


def test_fused_lr_sweep_equals_its_serial_twin_which_cpu_runs_one_by_one(tmp_path, store_template):
    roots = {}
    for name in ("fused", "serial"):
        roots[name] = tmp_path / name
        roots[name].mkdir()
        (roots[name] / "mlflow.db").write_bytes(store_template.read_bytes())
    fused = run_cli([*LSTM, "model.net.hidden_size=16", LRS, *FUSED], roots["fused"])
    assert fused.returncode == 0, fused.stderr[-3000:]
    # the twin: fuse=array without fuse.force on CPU runs the same jobs serially, as jobs
    serial = run_cli([*LSTM, "model.net.hidden_size=16", LRS, "fuse=array"], roots["serial"])
    assert serial.returncode == 0, serial.stderr[-3000:]

    assert fuse_lines(fused) == []  # nothing kept apart
    parent, children = sweep_runs(MlflowClient(f"sqlite:///{roots['fused']}/mlflow.db"))
    assert parent.info.status == "FINISHED"
    fused_runs = by_lr(children)
    assert sorted(fused_runs) == ["0.01", "0.1"]
    assert sorted(r.data.tags["hpml.fused.member"] for r in children) == ["0", "1"]
    for lr, run in fused_runs.items():
        assert run.info.status == "FINISHED"
        assert run.data.tags["hpml.fused"] == "true"
        assert run.data.tags["hpml.fused.array_size"] == "2"
        folder = job_dir(run)
        overrides = yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text())
        assert f"model.optimizer.lr={lr}" in overrides
        record = json.loads((folder / "hpml_job.json").read_text())
        assert record == {"status": "FINISHED", "error": None, "run_id": run.info.run_id}

    (line,) = fuse_lines(serial)
    assert line.startswith("hpml: fuse=array: on CPU a fused array trains slower"), line
    assert "running the 2 jobs one by one; fuse.force=true fuses anyway" in line
    parent, children = sweep_runs(MlflowClient(f"sqlite:///{roots['serial']}/mlflow.db"))
    assert parent.info.status == "FINISHED"
    serial_runs = by_lr(children)
    assert sorted(serial_runs) == ["0.01", "0.1"]
    assert {r.info.status for r in children} == {"FINISHED"}
    assert not any("hpml.fused" in r.data.tags for r in children)

    for name in ("val/loss", "test/loss"):
        for lr in ("0.1", "0.01"):
            assert fused_runs[lr].data.metrics[name] == pytest.approx(
                serial_runs[lr].data.metrics[name], rel=1e-5
            ), (name, lr)
        # each member trained with its own learning rate, not the other's
        assert fused_runs["0.1"].data.metrics[name] != pytest.approx(
            fused_runs["0.01"].data.metrics[name], rel=1e-5
        ), name


def test_shape_changing_key_is_refused_in_one_line_and_every_job_runs(root, client):
    result = run_cli([*LSTM, "model.net.hidden_size=16,32", *FUSED], root)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = fuse_lines(result)
    assert line.startswith("hpml: fuse=array: not fusing: model.net.hidden_size "), line
    parent, children = sweep_runs(client)
    assert parent.info.status == "FINISHED"
    assert sorted(r.data.params["model.net.hidden_size"] for r in children) == ["16", "32"]
    assert {r.info.status for r in children} == {"FINISHED"}
    assert not any("hpml.fused" in r.data.tags for r in children)


def test_max_members_splits_four_jobs_into_two_arrays_of_two(root, client):
    lrs = "model.optimizer.lr=0.1,0.03,0.01,0.003"
    args = [*LSTM, "model.net.hidden_size=16", lrs, *FUSED, "fuse.max_members=2"]
    result = run_cli(args, root)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = fuse_lines(result)
    assert line.startswith("hpml: fuse=array: 4 jobs in 2 arrays (2, 2 members)"), line
    assert "fuse.max_members" in line
    parent, children = sweep_runs(client)
    assert parent.info.status == "FINISHED"
    assert len(children) == 4
    assert {r.info.status for r in children} == {"FINISHED"}
    sweep_dir = Path(parent.data.tags["hpml.sweep_dir"])
    arrays = Counter(r.data.tags["hpml.fused.array"] for r in children)
    assert arrays == {str(sweep_dir / "0"): 2, str(sweep_dir / "2"): 2}  # jobs 0-1 and 2-3
    for array in arrays:
        members = [r for r in children if r.data.tags["hpml.fused.array"] == array]
        assert sorted(r.data.tags["hpml.fused.member"] for r in members) == ["0", "1"]
        assert {r.data.tags["hpml.fused.array_size"] for r in members} == {"2"}
    assert len({r.data.metrics["val/loss"] for r in children}) == 4


def test_a_callback_that_does_not_say_how_it_runs_in_an_array_runs_the_sweep_one_by_one(
    root, client
):
    extra = "+callbacks.quiet._target_=tests.helpers.Undeclared"
    result = run_cli([*LSTM, "model.net.hidden_size=16", LRS, *FUSED, extra], root)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = fuse_lines(result)
    assert line == (
        "hpml: fuse=array: not fusing: callbacks.quiet is set, and tests.helpers.Undeclared does "
        "not say how it runs in an array (in_array: per member, once, not in arrays or serial); "
        "running the 2 jobs one by one"
    )
    parent, children = sweep_runs(client)
    assert parent.info.status == "FINISHED"
    assert sorted(by_lr(children)) == ["0.01", "0.1"]
    assert {r.info.status for r in children} == {"FINISHED"}
    assert not any("hpml.fused" in r.data.tags for r in children)


def test_failed_array_fails_every_member_and_the_sweep(root, client):
    fail = [
        "+callbacks.fail._target_=tests.helpers.FailAtEpoch",
        "+callbacks.fail.epoch=0",  # its class runs it once on an array (in_array)
    ]
    result = run_cli([*LSTM, "model.net.hidden_size=16", LRS, *FUSED, *fail], root)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 3, result.stderr[-3000:]  # the error, the sweep's summary, its page
    assert "RuntimeError: injected failure at epoch 0" in lines[0]
    assert "2 runs, 2 failed" in lines[1]
    assert "make ui" in lines[2]
    parent, children = sweep_runs(client)
    assert parent.info.status == "FAILED"
    assert len(children) == 2
    for run in children:
        assert run.data.tags["hpml.fused"] == "true"
        assert run.info.status == "FAILED"
        assert "injected failure at epoch 0" in run.data.tags["hpml.error"]
        assert "error/traceback.txt" in {
            a.path for a in client.list_artifacts(run.info.run_id, "error")
        }
        record = json.loads((job_dir(run) / "hpml_job.json").read_text())
        assert record["status"] == "FAILED"
        assert record["run_id"] == run.info.run_id


def test_diverging_member_is_frozen_tagged_and_fails_the_sweep_while_the_other_finishes(
    root, client
):
    # Adam's step is at most its lr, so only float32 overflow makes it diverge (about 1e37 to
    # 3.4e37, above which torch's Adam raises instead); SGD's step grows with its gradient, and
    # at lr 1e30 this LSTM's loss is NaN by its third step.
    args = [
        *LSTM,
        "model.net.hidden_size=16",
        "model/optimizer=sgd",
        "model.optimizer.lr=0.01,1e30",
    ]
    result = run_cli([*args, *FUSED], root)
    assert result.returncode == 1, result.stderr[-3000:]  # the NaN return is a failed job
    assert "Traceback" not in result.stderr
    assert fuse_lines(result) == []  # one array of both jobs
    parent, children = sweep_runs(client)
    summary, where = stderr_lines(result)
    assert summary == f"hpml: sweep {parent.info.run_name} ({parent.info.run_id}): 2 runs, 1 failed"
    assert where.endswith(f"/runs/{parent.info.run_id}")
    assert parent.info.status == "FAILED"
    runs = by_lr(children)
    assert sorted(runs) == ["0.01", "1e+30"]
    for run in children:
        assert run.data.tags["hpml.fused"] == "true"
        assert run.data.tags["hpml.fused.array_size"] == "2"
        # each ends as its serial job would: FINISHED; only the diverged one's return is NaN
        assert run.info.status == "FINISHED"

    step = int(runs["1e+30"].data.tags["hpml.fused.diverged_at_step"])
    assert 0 <= step < 4  # within the first epoch: 128 samples in batches of 32
    sane = runs["0.01"]
    assert "hpml.fused.diverged_at_step" not in sane.data.tags
    assert math.isfinite(sane.data.metrics["val/loss"])
    assert math.isfinite(sane.data.metrics["test/loss"])
