"""MFU on a CUDA device: against the datasheet peak of the trainer's precision (mixed precision
included) and against the peak measured on the device in the dtype that precision computes in,
each worked out again from the logged achieved FLOP/s and the peak's own source (the table, the
measured record)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hpml.analysis.devices import match_device_name
from hpml.names import MFU_PEAK_DTYPE_TAG
from hpml.train import train
from tests.conftest import QUICK

pytestmark = pytest.mark.gpu

CUDA_VAE = ["trainer=gpu", "model=vae", *QUICK]
STAGES = ("train", "val", "test")


def cuda_run(composed, client, overrides: list[str]):
    train(composed([*CUDA_VAE, *overrides]))
    return client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]


def measured_record(peaks, name: str, dtype: str) -> dict:
    """The one record of ``dtype`` this device and thread count have in the cache ``peaks``."""
    records = [json.loads(path.read_text()) for path in peaks.glob("*.json")]
    (record,) = [
        r
        for r in records
        if r["device"] == name
        and r["torch_threads"] == torch.get_num_threads()
        and r["dtype"] == dtype
    ]
    return record


def datasheet():
    """The KNOWN_DEVICES entry of the device torch reports; the test fails if there is none."""
    name = torch.cuda.get_device_name(0)
    peak = match_device_name(name)
    assert peak is not None, f"{name!r} has no entry in hpml.analysis.devices.KNOWN_DEVICES"
    return name, peak


@pytest.mark.parametrize(
    ("precision", "figure", "dtype"),
    [("bf16-mixed", "bf16_flops_per_s", "bf16"), ("16-mixed", "fp16_flops_per_s", "fp16")],
)
def test_mixed_precision_mfu_is_against_the_peaks_of_that_precision(
    composed, client, monkeypatch, tmp_path, precision, figure, dtype
):
    """Against the datasheet's tensor-core figure, and the peak measured in the run's own
    dtype, into a cache of the run's own (see the fp32 test below)."""
    monkeypatch.setenv("HPML_PEAK_CACHE", str(tmp_path / "peaks"))
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
    record = measured_record(tmp_path / "peaks", name, dtype)  # only the run's dtype measured
    assert len(list((tmp_path / "peaks").glob("*.json"))) == 1
    measured = record["flops_per_s"]
    assert run.data.tags[MFU_PEAK_DTYPE_TAG] == record["taken_in"] == dtype
    # tensor cores: above the fp32 datasheet figure, below 1.2x the dtype's own
    assert peak.fp32_flops_per_s < measured < 1.2 * expected_peak
    assert m["mfu/peak_measured_flops_per_s"] == pytest.approx(measured, rel=1e-5)
    for stage in STAGES:
        achieved = m[f"{stage}/achieved_flops_per_s"]
        assert m[f"{stage}/mfu_measured_pct"] == pytest.approx(
            100 * achieved / measured, rel=1e-5
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
    record = measured_record(tmp_path / "peaks", name, "fp32")
    measured = record["flops_per_s"]
    benchmarks = record["compute_flops_per_s"]  # GEMM and each 3x3 convolution shape
    assert measured == max(benchmarks.values()) > 0
    assert run.data.tags[MFU_PEAK_DTYPE_TAG] == record["taken_in"]
    assert record["taken_in"] == "fp32 (matmul {matmul}, conv {conv})".format_map(
        record["fp32_precision"]
    )
    # each benchmark below 1.2x the datasheet figure of the precision it ran at: cuBLAS's fp32
    # GEMM at torch's matmul setting, cuDNN's convolutions at its own (tf32 by default)
    tf32 = {
        "gemm": record["fp32_precision"]["matmul"] == "tf32",
        "conv": record["fp32_precision"]["conv"] == "tf32",
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
