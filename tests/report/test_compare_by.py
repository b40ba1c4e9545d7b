"""Where a run ran is part of what it is, and the report compares by any key: runs in real MLflow
stores (one or two SQLite files), logged as hpml logs them with known speeds and environment
tags; grouped, paired by a param or an environment key, a sweep checked against an earlier one
for a known 20% slowdown, and the comparison's CSV checked against what MLflow holds."""

from __future__ import annotations

import csv
import shutil
import statistics
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from hpml.analysis.stats import FASTER, SLOWER, WITHIN_NOISE
from hpml.report.__main__ import main
from hpml.report.environment import STORE_TAG
from hpml.report.groups import group
from hpml.report.pairs import by_key, paired
from hpml.report.stores import Stores

SPEED = "train/throughput_samples_per_s"
STEP = "train/step_time_p50_ms"
JITTER = (1.0, 1.01, 0.99)  # three repeats of one config
ENV = {
    "hpml.device": "cpu: Test CPU",
    "hpml.cpu_model": "Test CPU",
    "hpml.host": "node-1",
    "hpml.cpu_threads": "1",
    "hpml.torch_version": "2.14.0",
    "hpml.cuda_version": "None",
    "hpml.git_commit": "a" * 40,
}


def sweep(client: MlflowClient, name: str = "hpml") -> tuple[str, str]:
    """A sweep's parent run in experiment ``name``: (experiment id, parent id); artifacts
    beside the store."""
    found = client.get_experiment_by_name(name)
    artifacts = Path(str(client.tracking_uri).removeprefix("sqlite:///")).parent / "artifacts"
    experiment = (
        found.experiment_id
        if found
        else client.create_experiment(name, artifact_location=artifacts.as_uri())
    )
    parent = client.create_run(experiment, tags={"hpml.sweep_parent": "true"})
    client.set_terminated(parent.info.run_id)
    return experiment, parent.info.run_id


def repeats(
    client: MlflowClient,
    where: tuple[str, str],
    batch: int,
    speed: float,
    env: dict[str, str] | None = None,
    noisy: bool = False,
) -> list[str]:
    """Three repeats of the config at ``batch`` in sweep ``where``, at about ``speed``
    samples/s (step time to match), in environment ``ENV | env``."""
    experiment, parent = where
    ids = []
    for replicate, factor in enumerate(JITTER):
        tags = {"mlflow.parentRunId": parent, "hpml.choice.model": "vgg11", **ENV, **(env or {})}
        if noisy:
            tags["hpml.noisy"] = "true"
        run = client.create_run(experiment, tags=tags)
        params = {"data.batch_size": str(batch), "replicate": str(replicate)}
        params["seed"] = str(replicate + 1)
        throughput = speed * factor
        metrics = {SPEED: throughput, STEP: 1000 * batch / throughput}
        client.log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag("mlflow.runName", f"b{batch}-r{replicate}")],
        )
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    return ids


def runs_of(client: MlflowClient) -> list:
    found = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return sorted(
        [r for r in found if r.data.tags.get("hpml.sweep_parent") != "true"],
        key=lambda r: r.info.start_time,
    )


def test_runs_that_ran_elsewhere_are_never_repeats(client):
    where = sweep(client)
    same = repeats(client, where, 16, 1000.0)  # one config, one environment
    repeats(client, where, 16, 1000.0, {"hpml.host": "node-2"})  # another host: still repeats
    repeats(client, where, 16, 1700.0, {"hpml.cpu_threads": "2"})
    repeats(client, where, 16, 1000.0, {"hpml.git_commit": "b" * 40})
    repeats(client, where, 16, 1000.0, {"hpml.torch_version": "2.15.0"})
    found = group(runs_of(client))
    assert [len(g.runs) for g in found] == [6, 3, 3, 3]
    assert set(same) < {r.info.run_id for r in found[0].runs}
    assert found[1].label == "env.cpu_threads=2, env.torch=2.14.0, env.commit=aaaaaaaaaaaa"
    # one environment: no env key in any label, one group
    assert [g.label for g in group(runs_of(client)[:3])] == ["all runs"]


def test_pairs_by_a_param_and_by_an_environment_key(client):
    where = sweep(client)
    for threads, speed in (("1", 1000.0), ("2", 1800.0)):
        repeats(client, where, 16, speed, {"hpml.cpu_threads": threads})
        repeats(client, where, 64, 1.5 * speed, {"hpml.cpu_threads": threads})
    runs = runs_of(client)
    by_threads = by_key(runs, "env.cpu_threads")
    assert [p.config for p in by_threads.pairs] == ["data.batch_size=16", "data.batch_size=64"]
    for pair in by_threads.pairs:
        assert list(pair.sides) == ["1", "2"] and [len(g.runs) for g in pair.sides.values()] == [
            3,
            3,
        ]
        (speed,) = [c for c in pair.comparisons if c.measure == SPEED]
        assert speed.ratio == pytest.approx(1.8) and speed.verdict == FASTER
        (step,) = [c for c in pair.comparisons if c.measure == STEP]
        assert step.ratio == pytest.approx(1.8) and step.verdict == FASTER  # > 1: faster
    pairs, alone = paired(runs, "data.batch_size")
    assert [p.config for p in pairs] == ["env.cpu_threads=1", "env.cpu_threads=2"] and not alone
    assert list(pairs[0].sides) == ["16", "64"]
    (speed,) = [c for c in pairs[0].comparisons if c.measure == SPEED]
    assert speed.ratio == pytest.approx(1.5)
    with pytest.raises(Exception, match="no run has it"):
        by_key(runs, "env.nothing")


def two_sweeps(client: MlflowClient, slowdown: float) -> tuple[str, str]:
    """A baseline sweep and a later one on another commit, batch 32 and 64 three times each:
    ``slowdown`` slower in the new one, batch 32's new runs noisy."""
    old, new = sweep(client), sweep(client)
    for batch, speed in ((32, 1200.0), (64, 1500.0)):
        repeats(client, old, batch, speed)
        later = speed * (1 - slowdown) * 1.002
        repeats(client, new, batch, later, {"hpml.git_commit": "c" * 40}, noisy=batch == 32)
    return old[1], new[1]


@pytest.mark.parametrize("slowdown", [0.2, 0.0])
def test_fail_on_slower_names_each_config_beyond_the_threshold(client, tmp_path, capsys, slowdown):
    old, new = two_sweeps(client, slowdown)
    uri = str(client.tracking_uri)
    args = ["--tracking-uri", uri, "--sweep", new, "--baseline", old, "--fail-on", "slower"]
    code = main([*args, "--out", str(tmp_path / "report")])
    err = capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "report/tables/by_sweep.csv").open()))
    verdicts = {(r["config"], r["measure"]): r["verdict"] for r in rows}
    assert verdicts[("data.batch_size=32", SPEED)] == WITHIN_NOISE  # noisy: never a finding
    if slowdown:
        assert code == 1
        assert verdicts[("data.batch_size=64", SPEED)] == SLOWER
        lines = [line for line in err.splitlines() if line.startswith("hpml: slower: ")]
        assert len(lines) == 1 and lines[0].startswith("hpml: slower: data.batch_size=64 (new")
        assert "0.802x" in lines[0] and list(rows[0])[2:4] == ["baseline", "new"]
    else:
        assert code == 0, err
        assert set(verdicts.values()) == {WITHIN_NOISE}


def test_several_stores_in_one_report_whose_csv_is_what_mlflow_holds(client, root, tmp_path):
    other = MlflowClient(f"sqlite:///{shutil.copy(root / 'mlflow.db', tmp_path / 'b.db')}")
    parents = []
    for store, threads, speed in ((client, "1", 1000.0), (other, "2", 1700.0)):
        where = sweep(store)
        parents.append(where[1])
        repeats(store, where, 16, speed, {"hpml.cpu_threads": threads})
        repeats(store, where, 64, 1.4 * speed, {"hpml.cpu_threads": threads})
    failed = other.create_run(where[0], tags={**ENV, "hpml.cpu_threads": "2"})  # filtered out
    other.log_batch(
        failed.info.run_id,
        metrics=[Metric(SPEED, 1.0, 0, 0)],
        params=[Param("data.batch_size", "64"), Param("replicate", "3")],
    )
    other.set_terminated(failed.info.run_id, "FAILED")
    uris = [str(client.tracking_uri), str(other.tracking_uri)]
    stores = Stores([client, other])  # a sweep in whichever store holds it; the last of all
    assert stores.sweep(parents[0]).data.tags[STORE_TAG] == uris[0]
    assert stores.sweep("last").info.run_id == parents[1]
    assert [len(stores.jobs(stores.sweep(p))) for p in parents] == [6, 6]
    out = tmp_path / "report"
    code = main(
        [
            *("--tracking-uri", uris[0], "--tracking-uri", uris[1]),
            *("--filter", "attributes.status = 'FINISHED'"),
            *("--by", "env.cpu_threads", "--out", str(out)),
        ]
    )
    assert code == 0
    rows = list(csv.DictReader((out / "tables/by_env.cpu_threads.csv").open()))
    assert list(rows[0]) == [
        "config",
        "measure",
        "1",
        "2",
        "ratio",
        "ci_low",
        "ci_high",
        "n",
        "verdict",
        "note",
    ]
    held = {}  # (batch, threads) -> MLflow's throughputs
    for store in (client, other):
        for run in runs_of(store):
            if run.info.status == "FINISHED" and SPEED in run.data.metrics:
                key = (run.data.params["data.batch_size"], run.data.tags["hpml.cpu_threads"])
                held.setdefault(key, []).append(run.data.metrics[SPEED])
    assert len(held[("64", "2")]) == 3
    for row in [r for r in rows if r["measure"] == SPEED]:
        batch = row["config"].removeprefix("data.batch_size=")
        one, two = statistics.median(held[(batch, "1")]), statistics.median(held[(batch, "2")])
        assert float(row["1"]) == one and float(row["2"]) == two
        assert float(row["ratio"]) == pytest.approx(two / one)
        assert float(row["ci_low"]) > 1 and row["verdict"] == FASTER and row["n"] == "3"
    runs_csv = list(csv.DictReader((out / "tables/runs.csv").open()))
    assert {r["store"] for r in runs_csv} == set(uris) and len(runs_csv) == 12
    assert {r["env.cpu_threads"] for r in runs_csv} == {"1", "2"}
    html = (out / "report.html").read_text()
    assert html.index("Compared by env.cpu_threads") < html.index("<h2>Runs</h2>")
    assert "env.cpu_threads = 1, 2" in html and f"{uris[1]} (6 runs)" in html
