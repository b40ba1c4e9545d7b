"""The report's fused-array table on runs in a real MLflow store: a 2-member fused sweep and
its serial twin sweep, recorded with the params, tags and metrics hpml logs for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from hpml.fused.members import ARRAY_SIZE_TAG, ARRAY_TAG, FUSED_TAG, MEMBER_TAG
from hpml.report.__main__ import build, main
from hpml.report.runs import sweep_children

SPEED = "train/throughput_samples_per_s"
TITLE = "Fused arrays vs their serial twins (HFTA)"
FIGURE = "Fused arrays vs serial twins: samples/s"


def sweep(client: MlflowClient, experiment: str, folder: Path) -> str:
    parent = client.create_run(
        experiment, tags={"hpml.sweep_parent": "true", "hpml.sweep_dir": str(folder)}
    )
    client.set_terminated(parent.info.run_id)
    return parent.info.run_id


def job(
    client: MlflowClient,
    parent: str,
    num: int,
    params: dict[str, str],
    metrics: dict[str, float],
    status: str = "FINISHED",
    fused: int | None = None,
) -> str:
    """Job ``num`` of sweep ``parent``, with the folders a Hydra job has; ``fused``: its member
    index in the array the sweep's job 0 leads (2 members)."""
    experiment = client.get_run(parent).info.experiment_id
    folder = Path(client.get_run(parent).data.tags["hpml.sweep_dir"])
    output = folder / str(num)
    tags = {
        "mlflow.parentRunId": parent,
        "hpml.job_num": str(num),
        "hpml.output_dir": str(output),
        "hpml.sweep_dir": str(folder),
    }
    config = {
        **params,
        "optimized_metric": "val/loss",
        "paths.output_dir": str(output),
        "trainer.default_root_dir": str(output),
        "callbacks.checkpoint.dirpath": f"{output}/checkpoints",
        "fuse.mode": "none",
    }
    if fused is not None:
        tags |= {
            FUSED_TAG: "true",
            ARRAY_SIZE_TAG: "2",
            MEMBER_TAG: str(fused),
            ARRAY_TAG: str(folder / "0"),
        }
        config |= {"fuse.mode": "array", "fuse.force": "True", "fuse.max_members": "None"}
    run_id = client.create_run(experiment, tags=tags).info.run_id
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, 0, 1) for k, v in metrics.items()],
        params=[Param(k, v) for k, v in config.items()],
        tags=[RunTag("mlflow.runName", f"job-{num}")],
    )
    client.set_terminated(run_id, status)
    return run_id


@pytest.fixture
def sweeps(client: MlflowClient, tmp_path: Path) -> tuple[str, str, dict[str, str]]:
    """A fused sweep of lr 1e-3 and 3e-2 (100 samples/s per member) and its serial sweep: the
    twins (80 and 50 samples/s), one failed run of lr 3e-2 and one of another batch size."""
    experiment = client.create_experiment("hpml", artifact_location=(tmp_path / "art").as_uri())
    fused = sweep(client, experiment, tmp_path / "multirun" / "fused")
    serial = sweep(client, experiment, tmp_path / "multirun" / "serial")
    small, large = {"model.optimizer.lr": "0.001"}, {"model.optimizer.lr": "0.03"}
    base = {"data.batch_size": "32", "seed": "42"}
    ids = {
        "member 0": job(client, fused, 0, base | small, {"val/loss": 2.0, SPEED: 100.0}, fused=0),
        "member 1": job(client, fused, 1, base | large, {"val/loss": 3.0, SPEED: 100.0}, fused=1),
        "twin 0": job(client, serial, 0, base | small, {"val/loss": 1.5, SPEED: 80.0}),
        "twin 1": job(client, serial, 1, base | large, {"val/loss": 3.25, SPEED: 50.0}),
        "failed": job(client, serial, 2, base | large, {SPEED: 900.0}, status="FAILED"),
        "batch 64": job(
            client, serial, 3, small | {"data.batch_size": "64", "seed": "42"}, {SPEED: 900.0}
        ),
    }
    return fused, serial, ids


def fused_table(client: MlflowClient, runs: list, serial: list = ()) -> list[list[str]]:
    report = build(client, runs, None, serial)
    (table,) = [t for t in report.tables if t.title == TITLE]
    return [dict(zip(table.headings, row, strict=True)) for row in table.rows]


def test_members_meet_their_serial_twins_from_twin_option(client, sweeps, tmp_path, capsys):
    fused, serial, ids = sweeps
    uri = client.tracking_uri
    argv = ["--sweep", fused, "--twin", serial, "--tracking-uri", uri, "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""
    md = (tmp_path / "r" / "report.md").read_text()
    assert f"## {TITLE}" in md and "2 of 2 found" in md and f"## {FIGURE}" in md
    twin0, twin1 = ids["twin 0"][:8], ids["twin 1"][:8]
    # run, status, array, member, lr, val/loss, member samples/s, size, array total, twin,
    # twin val/loss, difference, twin samples/s, speed-up (2 x 100 / 80 and 2 x 100 / 50)
    assert (
        f"| job 0 | FINISHED | 0 | 0 | 0.001 | 2 | 100 | 2 | 200 | job 0 ({twin0}) | 1.5 | 0.5 "
        "| 80 | 2.5x [no interval] — within noise (n=1) |" in md
    )
    assert (
        f"| job 1 | FINISHED | 0 | 1 | 0.03 | 3 | 100 | 2 | 200 | job 1 ({twin1}) | 3.25 | -0.25 "
        "| 50 | 4x [no interval] — within noise (n=1) |" in md
    )
    svg = (tmp_path / "r" / "figures" / "1.svg").read_text()  # before the learning curves
    assert "2 members: 1 arrays, 200 samples/s in total" in svg
    assert "2 serial twins, one by one: 61.54 samples/s" in svg  # 2 / (1/80 + 1/50)


def test_twins_among_the_reports_own_runs(client, sweeps):
    *_, ids = sweeps
    runs = [client.get_run(ids[name]) for name in ("member 1", "member 0", "twin 1", "batch 64")]
    rows = fused_table(client, runs)
    assert [r["member"] for r in rows] == ["0", "1"]  # by array, then member
    assert rows[0]["serial twin"] == "" and rows[0]["speed-up (x, array total / twin)"] == ""
    assert rows[1]["serial twin"] == f"job 1 ({ids['twin 1'][:8]})"
    assert rows[1]["val/loss difference (fused - twin)"] == "-0.25"
    # one run a side: no interval, so never a bare ratio but within noise
    assert rows[1]["speed-up (x, array total / twin)"] == "4x [no interval] — within noise (n=1)"


def test_a_twin_differs_from_its_member_only_in_fuse_keys_and_own_folders(client, sweeps):
    fused, serial, _ = sweeps
    members = sweep_children(client, client.get_run(fused))
    candidates = sweep_children(client, client.get_run(serial))
    # another seed is another job, whatever else it shares with a member
    config = {"data.batch_size": "32", "seed": "7", "model.optimizer.lr": "0.001"}
    other = client.get_run(job(client, serial, 4, config, {SPEED: 1.0}))
    rows = fused_table(client, members, [*candidates, other])
    assert [r["twin (samples/s)"] for r in rows] == ["80", "50"]  # not the failed, not batch 64
    config = {"data.batch_size": "32", "seed": "42", "model.optimizer.lr": "0.001"}
    newer = job(client, serial, 5, config, {"val/loss": 1.0, SPEED: 40.0})  # the newest twin
    rows = fused_table(client, members, [*candidates, client.get_run(newer)])
    assert rows[0]["twin (samples/s)"] == "40" and rows[0][
        "speed-up (x, array total / twin)"
    ].startswith("5x [no interval]")


def test_a_report_without_fused_runs_has_no_fused_table(client, sweeps, tmp_path, capsys):
    _, serial, _ = sweeps
    uri = client.tracking_uri
    argv = [
        "--sweep",
        serial,
        "--twin",
        serial,
        "--tracking-uri",
        uri,
        "--out",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 0
    assert "hpml: warning: --twin: the report's runs have no fused members" in (
        capsys.readouterr().err
    )
    md = (tmp_path / "r" / "report.md").read_text()
    assert TITLE not in md and FIGURE not in md and md.count("\n| job ") == 4
