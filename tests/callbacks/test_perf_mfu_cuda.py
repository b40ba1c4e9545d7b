"""MFU on a CUDA device: against the datasheet peak of the trainer's precision (mixed precision
included) and against the peak measured on the device, each worked out again from the logged
achieved FLOP/s and the peak's own source (the table, the measured record)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hpml.analysis.devices import match_device_name
from hpml.train import train
from tests.conftest import QUICK

pytestmark = pytest.mark.gpu

CUDA_VAE = ["trainer=gpu", "model=vae", *QUICK]
STAGES = ("train", "val", "test")


def cuda_run(composed, client, overrides: list[str]):
    train(composed([*CUDA_VAE, *overrides]))
    return client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]


def datasheet():
    """The KNOWN_DEVICES entry of the device torch reports; the test fails if there is none."""
    name = torch.cuda.get_device_name(0)
    peak = match_device_name(name)
    assert peak is not None, f"{name!r} has no entry in hpml.analysis.devices.KNOWN_DEVICES"
    return name, peak


@pytest.mark.parametrize(
    ("precision", "figure"),
    [("bf16-mixed", "bf16_flops_per_s"), ("16-mixed", "fp16_flops_per_s")],
)
def test_mixed_precision_mfu_is_against_the_datasheet_peak_of_that_precision(
    composed, client, precision, figure
):
    run = cuda_run(composed, client, [f"trainer.precision={precision}"])
    m = run.data.metrics
    assert run.data.params["trainer.precision"] == precision
    for stage in STAGES:
        assert math.isfinite(m[f"{stage}/loss"]), stage
    name, peak = datasheet()
    assert run.data.tags["hpml.device"] == f"cuda: {name}"
    expected_peak = getattr(peak, figure)
    assert expected_peak is not None and expected_peak > peak.fp32_flops_per_s  # tensor cores
    assert peak.peak_for_precision(precision) == expected_peak
    assert m["mfu/peak_table_flops_per_s"] == pytest.approx(expected_peak, rel=1e-5)
    for stage in STAGES:
        achieved = m[f"{stage}/achieved_flops_per_s"]
        assert 0 < achieved < expected_peak, stage
        # medians over cycles of FLOP/s and of FLOP/s over the peak: the same cycle's, so
        # equal up to the float32 Lightning logs them in
        assert m[f"{stage}/mfu_table_pct"] == pytest.approx(
            100 * achieved / expected_peak, rel=1e-5
        ), stage


def test_fp32_mfu_against_a_measured_peak_below_the_datasheets(
    composed, client, monkeypatch, tmp_path
):
    """The run measures its peak into a cache of its own: in the session's shared one, a worker
    whose load has since dropped measures again and overwrites the record this run used."""
    monkeypatch.setenv("HPML_PEAK_CACHE", str(tmp_path / "peaks"))
    run = cuda_run(composed, client, [])
    m = run.data.metrics
    name, peak = datasheet()
    records = [json.loads(path.read_text()) for path in (tmp_path / "peaks").glob("*.json")]
    (record,) = [
        r for r in records if r["device"] == name and r["torch_threads"] == torch.get_num_threads()
    ]
    measured = record["peak"]["fp32_flops_per_s"]
    benchmarks = record["compute_flops_per_s"]  # GEMM and each 3x3 convolution shape
    assert measured == max(benchmarks.values()) > 0
    # each benchmark below 1.2x the datasheet figure of the precision it ran at: cuBLAS's fp32
    # GEMM at torch's matmul setting, cuDNN's convolutions at its own (tf32 by default)
    tf32 = {
        "gemm": record["matmul_fp32_precision"] == "tf32",
        "conv": record["cudnn_conv_fp32_precision"] == "tf32",
    }
    for bench, rate in benchmarks.items():
        kind = "gemm" if bench.startswith("gemm") else "conv"
        roof = peak.peak_for_precision("32-true", tf32=tf32[kind])
        assert 0 < rate < 1.2 * roof, (bench, rate, roof)
    table = peak.peak_for_precision("32-true")  # torch's matmul setting, as the run's
    assert m["mfu/peak_measured_flops_per_s"] == pytest.approx(measured, rel=1e-5)
    assert m["mfu/peak_table_flops_per_s"] == pytest.approx(table, rel=1e-5)
    for stage in STAGES:
        achieved = m[f"{stage}/achieved_flops_per_s"]
        assert achieved > 0, stage
        assert m[f"{stage}/mfu_measured_pct"] == pytest.approx(
            100 * achieved / measured, rel=1e-5
        ), stage
        assert m[f"{stage}/mfu_table_pct"] == pytest.approx(100 * achieved / table, rel=1e-5)
