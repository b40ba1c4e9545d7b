"""A run whose canary ran slower than its peers' (the other runs of its environment and host,
in every store the report reads) is flagged ``slow machine`` in the header, its row and
``tables/runs.csv``; ``--by`` and ``--baseline`` note sides whose canaries differ. Runs logged
into real MLflow stores as the canary logs them, with known times."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from hpml.names import (
    CANARY_PLAN_TAG,
    CANARY_POINTS,
    CANARY_SLOWDOWN,
    CANARY_THRESHOLD_TAG,
    MS,
    canary,
)
from hpml.report.__main__ import build, parse_args
from hpml.report.groups import Group, versus
from hpml.report.machine import SLOW_MACHINE, judge, slowdowns
from hpml.report.pairs import by_key
from hpml.report.regression import slower
from hpml.report.stores import Stores
from tests.report.test_compare_by import ENV, sweep

START, END = CANARY_POINTS
PLAN = "cpu_gemm n=512 float32, cpu_copy 16 MiB; best of 3 after 1 warm-up"
SPEED = "train/throughput_samples_per_s"


def logged(
    client: MlflowClient,
    where: tuple[str, str],
    gemm: tuple[float, float],
    copy: tuple[float, float] = (5.0, 5.0),
    tags: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    speed: float = 100.0,
) -> str:
    """A finished run of sweep ``where`` whose canary timed ``gemm`` and ``copy`` ms at its
    start and end, in environment ``ENV`` (changed by ``tags``), of plan ``PLAN``."""
    experiment, parent = where
    every = {
        "mlflow.parentRunId": parent,
        "hpml.choice.model": "vae",
        CANARY_PLAN_TAG: PLAN,
        CANARY_THRESHOLD_TAG: "0.25",
        **ENV,
        **(tags or {}),
    }
    jobs = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent}'")
    every["hpml.job_num"] = str(len(jobs))
    run = client.create_run(experiment, tags=every)
    metrics = {SPEED: speed}
    for when, g, c in zip((START, END), gemm, copy, strict=True):
        metrics[canary("cpu_gemm", when, MS)] = g
        metrics[canary("cpu_copy", when, MS)] = c
    client.log_batch(
        run.info.run_id,
        metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
        params=[Param(k, v) for k, v in {"replicate": str(len(jobs)), **(params or {})}.items()],
        tags=[RunTag("mlflow.runName", f"job {len(jobs)}")],
    )
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def test_a_run_slower_than_its_peers_median_is_flagged_in_header_row_and_csv(
    client: MlflowClient, tmp_path: Path
) -> None:
    where = sweep(client)
    gemms = [(10.0, 10.0), (10.5, 10.0), (9.8, 10.2), (30.0, 28.0), (12.0, 12.0), (10.0, 40.0)]
    ids = [logged(client, where, gemm) for gemm in gemms]
    stores = Stores([client])
    runs, parent = stores.select(where[1], None)
    found = slowdowns(stores, runs)
    assert set(found) == set(ids)  # 6 runs: each has 5 peers
    # job 3: 30 ms at its start against the median of the others' starts (10, 10.5, 9.8, 12,
    # 10), 3x; 28 at its end against theirs (10, 10, 10.2, 12, 40): the smaller, 2.75x, is slow
    assert (found[ids[3]].workload, found[ids[3]].points) == (
        "cpu_gemm",
        (START, END),
    )
    assert found[ids[3]].ratio == pytest.approx(28 / 10.2) and found[ids[3]].peers == 5
    # job 4 is 1.2x its peers' median at its start, 1.18x (12 / 10.2) at its end: within 25%
    assert found[ids[4]].ratio == pytest.approx(12.0 / 10.2) and not found[ids[4]].slow
    # job 5's GEMM is 3.9x its peers' at its end only: one slow moment, not a slow machine;
    # its slowest workload is its copy, as fast as its peers'
    assert (found[ids[5]].workload, found[ids[5]].ratio) == ("cpu_copy", 1.0)
    assert [found[i].slow for i in ids] == [False, False, False, True, False, False]

    report = build(stores, runs, parent)
    header = dict(report.header)["machine"]
    assert header.startswith(f"1 of 6 runs judged on a {SLOW_MACHINE} (canary slower than")
    assert header.endswith("by more than 25%): job 3 (cpu_gemm 2.75x)")
    html, md = report.write(tmp_path / "report")
    flag = f"{SLOW_MACHINE}: canary cpu_gemm 2.75x the median of 5 other runs at its start and end"
    rows = [line for line in md.read_text().splitlines() if line.startswith("| job ")]
    assert [flag in line for line in rows] == [False, False, False, True, False, False]
    assert flag in html.read_text()
    written = list(csv.DictReader((tmp_path / "report/tables/runs.csv").open()))
    assert [r["machine"] for r in written] == ["", "", "", flag, "", ""]
    by_id = {r["run_id"]: float(r[CANARY_SLOWDOWN]) for r in written}
    assert by_id == pytest.approx({i: found[i].ratio for i in ids})


def test_peers_are_runs_of_its_environment_host_and_plan_in_every_store_read(
    client: MlflowClient, tmp_path: Path, store_template: Path
) -> None:
    """The run is read alone (``--runs``); its peers are found in another experiment and
    another store; runs of another host, commit or plan never count, and with one peer only
    the run is not judged."""
    shutil.copy(store_template, tmp_path / "other.db")
    other = MlflowClient(f"sqlite:///{tmp_path / 'other.db'}")
    mine = logged(client, sweep(client), (20.0, 20.0))
    logged(client, sweep(client, "elsewhere"), (10.0, 10.0))
    strangers = [{"hpml.host": "node-2"}, {"hpml.git_commit": "b" * 40}, {CANARY_PLAN_TAG: "x"}]
    for tags in strangers:
        logged(client, sweep(client), (10.0, 10.0), tags=tags)
    stores = Stores([client, other])
    runs, _ = stores.select(None, [mine])
    assert slowdowns(stores, runs) == {}  # one peer: 2 runs of its kind in all
    logged(other, sweep(other), (10.0, 10.0))
    stores = Stores([client, other])  # the report's stores, opened again
    runs, _ = stores.select(None, [mine])
    (judged,) = slowdowns(stores, runs).values()
    assert (judged.ratio, judged.peers, judged.slow) == (2.0, 2, True)


def test_the_threshold_is_the_runs_own_unless_the_report_is_given_one(
    client: MlflowClient,
) -> None:
    where = sweep(client)
    tolerant = {CANARY_THRESHOLD_TAG: "0.5"}
    ids = [logged(client, where, (10.0, 10.0)) for _ in range(3)]
    ids.append(logged(client, where, (14.0, 14.0), tags=tolerant))
    stores = Stores([client])
    runs, _ = stores.select(where[1], None)
    run = next(r for r in runs if r.info.run_id == ids[-1])
    assert not judge(run, runs).slow  # 1.4x, its own threshold 50%
    assert judge(run, runs, override=0.25).slow
    assert parse_args(["--slow-machine", "0.1"]).slow_machine == 0.1
    with pytest.raises(SystemExit):
        parse_args(["--slow-machine", "0"])


def test_by_and_baseline_note_when_the_sides_canaries_differ_and_keep_their_verdict(
    client: MlflowClient,
) -> None:
    """``--by env.host``: node-2's canary is twice as slow as node-1's, and so its training;
    each comparison says so in a note, its verdict what it is without one. Two hosts alike: no
    note."""
    where = sweep(client)
    for host, gemm, speed in (("node-1", 10.0, 100.0), ("node-2", 20.0, 50.0)):
        for jitter in (1.0, 1.01, 0.99):
            tags = {"hpml.host": host}
            logged(client, where, (gemm * jitter, gemm), tags=tags, speed=speed * jitter)
    runs, _ = Stores([client]).select(where[1], None)
    compared = by_key(runs, "env.host")
    (pair,) = compared.pairs
    (comparison,) = compared.comparisons
    assert comparison.note.startswith(
        "canaries differ: cpu_gemm 2x slower than the reference's at the start and end"
    )
    assert "threshold 25%" in comparison.note and comparison.note in comparison.cell()
    sides = [Group(host, pair.sides[host].runs) for host in ("node-2", "node-1")]
    (plain,) = versus(*sides, comparison.comparison)
    assert (comparison.verdict, comparison.ratio) == (plain.verdict, plain.ratio)
    (line,) = slower(compared.pairs, 0.05)
    assert line.count("canaries differ") == 1
    assert by_key(runs, "env.host", slow_above=1.5).comparisons[0].note == ""

    alike = sweep(client)
    for host in ("node-1", "node-2"):
        for jitter in (1.0, 1.01, 0.99):
            logged(client, alike, (10.0 * jitter, 10.0), tags={"hpml.host": host})
    runs, _ = Stores([client]).select(alike[1], None)
    assert [c.note for c in by_key(runs, "env.host").comparisons] == [""]
