"""Counted points beside analytic ones: ``python -m hpml.report.roofline`` on a real SQLite store
this file writes, one run carrying Nsight Compute's counts (logged by ``python -m
hpml.profile.ncu --read`` from the fixture export), others analytic only."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hpml.analysis.ncu import load
from hpml.analysis.ncu_work import READ, check, step_metrics
from hpml.names import (
    BYTES,
    BYTES_PER_SAMPLE,
    FLOPS,
    FWD_BWD_FLOPS_PER_SAMPLE,
    FWD_FLOPS_PER_SAMPLE,
    INTENSITY,
    NCU_STEP_TAG,
    NCU_TENSOR_TAG,
    THROUGHPUT,
    ncu,
)
from hpml.profile.ncu import main as read_counts
from hpml.report import roofline
from hpml.report.roofline_counted import ANALYTIC, WINOGRAD

FIXTURE = Path(__file__).parents[1] / "analysis" / "ncu" / "raw_page.csv"
H100 = "cuda: NVIDIA H100 80GB HBM3"  # a datasheet roof: ridge 148 FLOP/byte at 32-true (tf32)
BATCH = 16


@pytest.fixture
def store(tmp_path, store_template):
    """(uri, client, experiment id) of a fresh copy of the session's store."""
    from mlflow import MlflowClient

    shutil.copy(store_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    artifacts = str(tmp_path / "artifacts")  # not ./mlruns, where the tests run
    return uri, client, client.create_experiment("roofline_vgg", artifact_location=artifacts)


def analytic_run(client, experiment: str, model: str, fwd_flops: float, intensity: float) -> str:
    """A finished run as the roofline callback leaves it: analytic FLOPs and least bytes per
    sample, a training throughput, on an H100."""
    run = client.create_run(experiment, run_name=model, tags={"hpml.device": H100})
    run_id = run.info.run_id
    client.set_tag(run_id, "hpml.choice.model", model)
    for key, value in (("data.batch_size", BATCH), ("trainer.precision", "32-true")):
        client.log_param(run_id, key, value)
    metrics = {
        INTENSITY: intensity,
        FWD_FLOPS_PER_SAMPLE: fwd_flops,
        BYTES_PER_SAMPLE: fwd_flops / intensity,
        FWD_BWD_FLOPS_PER_SAMPLE: 3 * fwd_flops,
        THROUGHPUT: 2000.0,
    }
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    client.set_terminated(run_id)
    return run_id


def report(uri: str, runs: list[str], out: Path, capsys) -> str:
    argv = ["--runs", *runs, "--tracking-uri", uri, "--out", str(out)]
    assert roofline.main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def lines_of(out: str, run_id: str) -> list[str]:
    """The run's row in the roofline table, then in the counted table where it has one."""
    return [row for row in out.splitlines() if row.startswith(run_id)]


def test_a_counted_run_is_drawn_beside_its_analytic_point_and_bound_by_it(store, tmp_path, capsys):
    uri, client, experiment = store
    # analytic: 160 FLOP/byte, right of the H100's ridge; counted (the fixture): 1.5 FLOP/byte
    plain = analytic_run(client, experiment, "vgg11", 1.0e6, 160.0)
    counted = analytic_run(client, experiment, "vgg13", 1.0e6, 160.0)
    assert read_counts(["--read", str(FIXTURE), "--run", counted, "--tracking-uri", uri]) == 0
    capsys.readouterr()
    out = report(uri, [plain, counted], tmp_path / "plots", capsys)
    step = step_metrics(check(load(FIXTURE, READ))[-1])
    fwd_flops, fwd_bytes = step[ncu("fwd", "", FLOPS)], step[ncu("fwd", "dram", BYTES)]
    intensity = fwd_flops / fwd_bytes
    (plain_line,), (counted_line, row) = lines_of(out, plain), lines_of(out, counted)
    assert "compute-bound" in plain_line and "train fwd+bwd" in plain_line
    # the verdict of the counted run comes from its counted intensity, left of the ridge
    assert "memory-bound" in counted_line and "forward kernels, counted" in counted_line
    assert f"{intensity:.3g}" in counted_line.split()
    cells = row.split()
    assert cells[2:5] == [f"{intensity:.3g}", "160", f"{intensity_both(step):.3g}"]
    assert f"{fwd_flops / (1.0e6 * BATCH):.2f}x" in cells  # counted / analytic FLOPs
    assert f"{fwd_bytes / (1.0e6 / 160.0 * BATCH):.2f}x" in cells  # DRAM / least bytes
    assert "2 of 2" in row and "unstated, unstated" in row
    # the fixture's tf32 tensor work has no factor on CC 9.0: a lower bound, not Winograd
    assert "FLOPs are a lower bound" in out and WINOGRAD not in out
    assert re.search(r"^counters read: dram__bytes_read\.sum, ", out, re.M)
    assert (tmp_path / "plots" / "roofline.png").stat().st_size > 20_000
    runs = [client.get_run(plain), client.get_run(counted)]
    fig = roofline.figure(runs, [])
    assert fig is not None and "Diamonds: a run's forward kernels" in fig.caption
    svg = ET.fromstring(fig.svg)
    tips = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title") if t.text]
    assert len(tips) == 3  # both analytic points and the counted one
    (tip,) = [t for t in tips if t.endswith("(forward kernels, counted)")]
    seconds = step[ncu("fwd", "kernel_time", "s")]
    assert f"{intensity:.3g} FLOP/byte, {fwd_flops / seconds / 1e9:.3g} GFLOP/s" in tip


def intensity_both(step: dict[str, float]) -> float:
    flops = step[ncu("fwd", "", FLOPS)] + step[ncu("bwd", "", FLOPS)]
    return flops / (step[ncu("fwd", "dram", BYTES)] + step[ncu("bwd", "dram", BYTES)])


def test_fewer_counted_flops_than_analytic_are_said_to_be_fewer_multiplies(store, tmp_path, capsys):
    uri, client, experiment = store
    run_id = analytic_run(client, experiment, "vgg19", 1.0e6, 160.0)
    # as the reader logs a step whose FLOPs are all known: 0.6x the analytic count
    counts = {
        ncu("fwd", "", FLOPS): 0.6e6 * BATCH,
        ncu("fwd", "dram", BYTES): 1.0e6 * BATCH / 20.0,
        ncu("fwd", "kernel_time", "s"): 1e-3,
    }
    for key, value in counts.items():
        client.log_metric(run_id, key, value)
    client.set_tag(run_id, NCU_TENSOR_TAG, "none")
    client.set_tag(run_id, NCU_STEP_TAG, "3 of 3")
    out = report(uri, [run_id], tmp_path, capsys)
    assert f"note: vgg19: 0.60x the analytic FLOPs, {WINOGRAD}" in out
    verdict, row = lines_of(out, run_id)
    assert verdict.split()[2] == row.split()[2] == "12"  # 0.6 x 20 FLOP/byte


def test_without_counters_the_table_and_plot_say_analytic_once(store, tmp_path, capsys):
    uri, client, experiment = store
    runs = [analytic_run(client, experiment, m, 1.0e6, 160.0) for m in ("vgg11", "vgg13")]
    out = report(uri, runs, tmp_path, capsys)
    assert out.count("analytic") == 1 and ANALYTIC in out
    assert "counted" not in out
    fig = roofline.figure([client.get_run(r) for r in runs], [])
    assert fig is not None and fig.caption.count("analytic") == 1 and "Diamonds" not in fig.caption
