"""profile=torch end to end in-process: a real trace, tables and a summary that sums to 100%."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpml.analysis.profile_summary import breakdown, shares_pct
from hpml.train import train
from tests.conftest import QUICK

REGIONS = {"hpml/data", "hpml/forward", "hpml/zero_grad", "hpml/backward", "hpml/optimizer_step"}


def test_breakdown_gives_each_instant_to_the_highest_priority_category():
    window = (0.0, 10.0)
    seconds = breakdown(window, [("kernel", [(1, 3)]), ("cpu", [(2, 6), (9, 12)])])
    assert seconds == {"kernel": 2.0, "cpu": 4.0, "other": 4.0}  # cpu loses 2..3 to kernel
    assert sum(shares_pct(seconds).values()) == pytest.approx(100.0)


def test_profiled_run_stores_trace_tables_and_summary(composed, client, root):
    cfg = composed(
        [
            "model=vae",
            *QUICK,
            "data.train_samples=512",
            "profile=torch",
            "profile.skip_first=2",
            "profile.active=2",
        ]
    )
    metrics = train(cfg)
    assert metrics["train/throughput_samples_per_s"] > 0  # normal metrics still logged
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]

    shares = {k: v for k, v in run.data.metrics.items() if k.startswith("profile/")}
    assert set(shares) == {
        "profile/data_loading_pct",
        "profile/operator_compute_pct",
        "profile/framework_overhead_pct",
        "profile/other_pct",
    }
    assert sum(shares.values()) == pytest.approx(100.0, abs=0.01)
    assert shares["profile/operator_compute_pct"] > 0

    files = {a.path for a in client.list_artifacts(run.info.run_id, "profiler/window_0")}
    assert {
        f"profiler/window_0/{name}"
        for name in (
            "trace.json",
            "ops.csv",
            "top_by_self_cpu_time.txt",
            "top_by_memory.txt",
            "top_by_input_shape.txt",
            "ops_by_input_shape.csv",
            "execution_summary.txt",
        )
    } <= files
    path = client.download_artifacts(run.info.run_id, "profiler/window_0/trace.json", str(root))
    trace = json.loads(Path(path).read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert names >= REGIONS
    assert sum(1 for name in names if str(name).startswith("ProfilerStep")) >= 1
    ops = Path(
        client.download_artifacts(run.info.run_id, "profiler/window_0/ops.csv", str(root))
    ).read_text()
    assert ops.startswith("name,input_shapes,count,self_cpu_time_total_us")
    assert "aten::addmm" in ops  # the VAE's Linear layers ran and were recorded


def test_profiled_run_without_trace_keeps_tables_and_summary(composed, client):
    """profile.trace=false (the GPU check's setting): no trace artifact, the rest as before."""
    overrides = ["profile.skip_first=2", "profile.active=2", "profile.trace=false"]
    cfg = composed(["model=vae", *QUICK, "data.train_samples=512", "profile=torch", *overrides])
    train(cfg)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    files = {a.path for a in client.list_artifacts(run.info.run_id, "profiler/window_0")}
    assert "profiler/window_0/trace.json" not in files
    assert {"profiler/window_0/ops.csv", "profiler/window_0/execution_summary.txt"} <= files
    assert run.data.metrics["profile/operator_compute_pct"] > 0


def test_lightning_simple_profiler_report_is_stored(composed, client):
    cfg = composed(["model=vae", *QUICK, "profile=simple"])
    train(cfg)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    paths = {a.path for a in client.list_artifacts(run.info.run_id, "profiler")}
    assert "profiler/lightning_fit.txt" in paths
