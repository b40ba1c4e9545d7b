"""Measured device peaks: the cached micro-benchmark in each dtype, and choosing table or
measurement."""

from __future__ import annotations

import json

import pytest
import torch

from hpml.analysis import measured_peak
from hpml.analysis.devices import KNOWN_DEVICES, fp32_precision
from hpml.analysis.measured_peak import (
    ComputePeak,
    measure_compute,
    measure_peak,
    raise_roof,
    resolve_peak,
    taken_in,
)
from hpml.analysis.roofline import RooflinePoint
from hpml.analysis.roofline_plot import above_roof


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cache = tmp_path_factory.mktemp("peaks")
    return measure_peak(torch.device("cpu"), cache, seconds=0.1), cache


def test_measured_peak_is_recorded_with_threads_and_load(measured):
    peak, cache = measured
    assert peak.fp32_flops_per_s > 1e8 and peak.memory_bytes_per_s > 1e8
    assert peak.tf32_flops_per_s is None and peak.fp16_flops_per_s is None
    assert peak.source.startswith("measured on ")
    (path,) = cache.glob("*.json")
    record = json.loads(path.read_text())
    # what the GEMM and convolutions may run at (oneDNN's settings on a CPU), in the name too
    matmul, conv = record["fp32_precision"]["matmul"], record["fp32_precision"]["conv"]
    assert record["fp32_precision"] == fp32_precision(torch.device("cpu"))
    assert record["dtype"] == "fp32"
    assert record["taken_in"] == f"fp32 (matmul {matmul}, conv {conv})"
    assert path.name.endswith(
        f"__{torch.get_num_threads()}threads__fp32-matmul-{matmul}-conv-{conv}"
        "__gemm-conv3x3-copy.json"
    )
    compute = record["compute_flops_per_s"]  # what was measured: GEMM and each conv shape
    assert len(compute) == 1 + len(measured_peak.CONV_SHAPES)
    assert peak.fp32_flops_per_s == max(compute.values())  # the roof is the best of them
    assert f"{record['taken_in']} {max(compute, key=compute.get)}" in peak.source
    assert record["torch_threads"] == torch.get_num_threads()
    assert len(record["load_avg_1m_5m_15m"]) == 3
    assert record["copy_bytes_convention"].startswith("read + written")
    assert record["flops_per_s"] == peak.fp32_flops_per_s
    assert record["memory_bytes_per_s"] == peak.memory_bytes_per_s


def test_second_call_reads_the_cache_without_measuring(measured, monkeypatch):
    peak, cache = measured

    def fail(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(measured_peak, "_gemm_flops_per_s", fail)
    monkeypatch.setattr(measured_peak.os, "getloadavg", lambda: (99.0, 99.0, 99.0))  # busier now
    assert measure_peak(torch.device("cpu"), cache) == peak
    assert resolve_peak(None, torch.device("cpu"), cache) == peak  # CPU: no table, measured
    # the MFU side reads the same fp32 record
    fp32 = measure_compute(torch.device("cpu"), cache, "fp32")
    assert fp32 == ComputePeak(
        taken_in("fp32", torch.device("cpu")), peak.fp32_flops_per_s, peak.source
    )


def test_measuring_leaves_the_random_stream_as_it_was(tmp_path):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)  # no record: measured
    assert torch.equal(torch.rand(3), expected)


def test_damaged_or_loaded_records_are_measured_again(tmp_path, measured, monkeypatch):
    _, cache = measured
    (path,) = cache.glob("*.json")
    record = tmp_path / path.name
    record.write_text("{not json")
    again = measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)
    assert json.loads(record.read_text())["source"] == again.source
    partial = json.loads(record.read_text()) | {"load_avg_1m_5m_15m": [0.0, 0.0, 0.0]}
    del partial["flops_per_s"]  # a record missing a figure it is read for
    record.write_text(json.dumps(partial))
    assert measure_compute(torch.device("cpu"), tmp_path, seconds=0.05).flops_per_s > 1e8
    assert "flops_per_s" in json.loads(record.read_text())
    busy = json.loads(record.read_text()) | {"load_avg_1m_5m_15m": [9.0, 9.0, 9.0]}
    record.write_text(json.dumps(busy))
    monkeypatch.setattr(measured_peak.os, "getloadavg", lambda: (0.5, 0.5, 0.5))  # quieter now
    measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)
    assert json.loads(record.read_text())["load_avg_1m_5m_15m"] == [0.5, 0.5, 0.5]


def test_resolve_peak_by_key_and_unknown_key(tmp_path):
    assert resolve_peak("v100", torch.device("cpu"), tmp_path) is KNOWN_DEVICES["v100"]
    with pytest.raises(ValueError, match=r"unknown device 'v200'.*a100-40gb"):
        resolve_peak("v200", torch.device("cpu"), tmp_path)


def test_records_of_old_are_not_reused(tmp_path, measured):
    """Records named as GEMM-only peaks were (no benchmark set in the name) and as fp32-only
    ones were (no dtype in the name) are read by no dtype."""
    _, cache = measured
    (path,) = cache.glob("*.json")
    threads = f"__{torch.get_num_threads()}threads"
    stem = path.name[: path.name.index(threads) + len(threads)]
    old = {"peak": {"fp32_flops_per_s": 1.0, "memory_bytes_per_s": 1.0}}  # a roof every layer beats
    old |= {"load_avg_1m_5m_15m": [0.0, 0.0, 0.0], "measured": "gemm-conv3x3-copy"}
    for name in (f"{stem}.json", f"{stem}__gemm-conv3x3-copy.json"):
        (tmp_path / name).write_text(json.dumps(old))
    fresh = measure_compute(torch.device("cpu"), tmp_path, "bf16", seconds=0.05)
    assert fresh.taken_in == "bf16" and fresh.flops_per_s > 1e8
    assert measure_peak(torch.device("cpu"), tmp_path, seconds=0.05).fp32_flops_per_s > 1e8
    assert len(list(tmp_path.glob("*.json"))) == 4  # the two old ones, untouched, and two new


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_each_dtype_is_measured_into_a_record_of_its_own_and_read_back(
    tmp_path, measured, monkeypatch, dtype
):
    _, cache = measured
    (fp32_path,) = cache.glob("*.json")
    (tmp_path / fp32_path.name).write_text(fp32_path.read_text())
    peak = measure_compute(torch.device("cpu"), tmp_path, dtype, seconds=0.05)
    (path,) = set(tmp_path.glob("*.json")) - {tmp_path / fp32_path.name}  # fp32's not rewritten
    assert (tmp_path / fp32_path.name).read_text() == fp32_path.read_text()
    assert path.name.endswith(f"threads__{dtype}__gemm-conv3x3-copy.json")
    record = json.loads(path.read_text())
    assert record["dtype"] == record["taken_in"] == peak.taken_in == dtype
    assert peak.flops_per_s == max(record["compute_flops_per_s"].values()) > 1e8
    assert peak.source.startswith("measured on ") and f": {dtype} " in peak.source

    def fail(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(measured_peak, "_gemm_flops_per_s", fail)
    assert measure_compute(torch.device("cpu"), tmp_path, dtype) == peak


def test_a_record_of_another_dtype_in_a_dtypes_place_is_measured_again(tmp_path, measured):
    """bf16 only: fp16 convolutions on a CPU take seconds, and the rule is one for all dtypes."""
    _, cache = measured
    (fp32_path,) = cache.glob("*.json")
    first = measure_compute(torch.device("cpu"), tmp_path, "bf16", seconds=0.05)
    (path,) = tmp_path.glob("*.json")
    quiet = json.loads(fp32_path.read_text()) | {"load_avg_1m_5m_15m": [0.0, 0.0, 0.0]}
    path.write_text(json.dumps(quiet))  # reused, were it taken in bf16
    again = measure_compute(torch.device("cpu"), tmp_path, "bf16", seconds=0.05)
    assert first.taken_in == again.taken_in == "bf16"
    assert json.loads(path.read_text())["dtype"] == "bf16"


def test_an_fp32_record_is_kept_per_matmul_setting(tmp_path):
    """tf32 (or, on a CPU, oneDNN's bf16) lets float32 matmuls run faster: a record measured
    under ``torch.set_float32_matmul_precision("high")`` is not the peak of a run without it."""
    cpu = torch.device("cpu")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        exact = measure_compute(cpu, tmp_path, "fp32", seconds=0.05)
        torch.set_float32_matmul_precision("high")
        allowed = measure_compute(cpu, tmp_path, "fp32", seconds=0.05)
    finally:
        torch.set_float32_matmul_precision(before)
    assert exact.taken_in.startswith("fp32 (matmul ieee, conv ")
    assert allowed.taken_in.startswith("fp32 (matmul tf32, conv ")
    records = sorted(json.loads(p.read_text())["taken_in"] for p in tmp_path.glob("*.json"))
    assert records == sorted([exact.taken_in, allowed.taken_in])


def test_an_unknown_dtype_is_refused_naming_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"'fp8'.*fp32, bf16, fp16"):
        measure_compute(torch.device("cpu"), tmp_path, "fp8")


def test_raise_roof_lifts_compute_and_bandwidth_to_the_best_points(measured):
    peak, _ = measured
    compute, bandwidth = peak.fp32_flops_per_s, peak.memory_bytes_per_s
    ridge = compute / bandwidth
    # 3 x the compute roof, right of the ridge; twice the slope's rate at half the ridge
    fast = RooflinePoint("conv", flops=300 * ridge, bytes=100, seconds=100 * ridge / compute)
    cached = RooflinePoint("fc", flops=50 * ridge, bytes=100, seconds=50 * ridge / compute)
    slow = RooflinePoint("pool", flops=1.0, bytes=100, seconds=1.0)
    assert [p for p, _ in above_roof([fast, cached, slow], peak)] == [fast, cached]
    raised = raise_roof(peak, [fast, cached, slow])
    assert raised.fp32_flops_per_s == pytest.approx(3 * compute)
    assert raised.memory_bytes_per_s == pytest.approx(2 * bandwidth)
    assert above_roof([fast, cached, slow], raised) == []
    assert "raised to the best point" in raised.name
    assert (
        "compute raised to conv's" in raised.source and "bandwidth raised to fc's" in raised.source
    )
    assert raise_roof(peak, [slow]) is peak  # nothing above: the measured roof stays
