"""Measured device peaks: the cached micro-benchmark, and choosing table or measurement."""

from __future__ import annotations

import json

import pytest
import torch

from hpml.analysis import measured_peak
from hpml.analysis.devices import KNOWN_DEVICES
from hpml.analysis.measured_peak import measure_peak, raise_roof, resolve_peak
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
    assert path.name.endswith(f"__{torch.get_num_threads()}threads__gemm-conv3x3-copy.json")
    record = json.loads(path.read_text())
    compute = record["compute_flops_per_s"]  # what was measured: GEMM and each conv shape
    assert len(compute) == 1 + len(measured_peak.CONV_SHAPES)
    assert peak.fp32_flops_per_s == max(compute.values())  # the roof is the best of them
    assert max(compute, key=compute.get) in peak.source
    assert record["torch_threads"] == torch.get_num_threads()
    assert len(record["load_avg_1m_5m_15m"]) == 3
    assert record["copy_bytes_convention"].startswith("read + written")
    # what the convolutions ran at (cuDNN's setting: tf32 by default on CUDA), beside the GEMM's
    assert record["cudnn_conv_fp32_precision"] == torch.backends.cudnn.conv.fp32_precision
    assert record["matmul_fp32_precision"] == torch.backends.cuda.matmul.fp32_precision
    assert record["peak"]["fp32_flops_per_s"] == peak.fp32_flops_per_s


def test_second_call_reads_the_cache_without_measuring(measured, monkeypatch):
    peak, cache = measured

    def fail(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(measured_peak, "_gemm_flops_per_s", fail)
    monkeypatch.setattr(measured_peak.os, "getloadavg", lambda: (99.0, 99.0, 99.0))  # busier now
    assert measure_peak(torch.device("cpu"), cache) == peak
    assert resolve_peak(None, torch.device("cpu"), cache) == peak  # CPU: no table, measured


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
    assert json.loads(record.read_text())["peak"]["source"] == again.source
    busy = json.loads(record.read_text()) | {"load_avg_1m_5m_15m": [9.0, 9.0, 9.0]}
    record.write_text(json.dumps(busy))
    monkeypatch.setattr(measured_peak.os, "getloadavg", lambda: (0.5, 0.5, 0.5))  # quieter now
    measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)
    assert json.loads(record.read_text())["load_avg_1m_5m_15m"] == [0.5, 0.5, 0.5]


def test_resolve_peak_by_key_and_unknown_key(tmp_path):
    assert resolve_peak("v100", torch.device("cpu"), tmp_path) is KNOWN_DEVICES["v100"]
    with pytest.raises(ValueError, match=r"unknown device 'v200'.*a100-40gb"):
        resolve_peak("v200", torch.device("cpu"), tmp_path)


def test_gemm_only_records_of_old_are_not_reused(tmp_path, measured):
    """A record named as GEMM-only peaks were (no benchmark set in the name) is not read."""
    _, cache = measured
    (path,) = cache.glob("*.json")
    old = json.loads(path.read_text())
    old["peak"]["fp32_flops_per_s"] = 1.0  # a roof every layer beats
    stem = path.name.removesuffix("__gemm-conv3x3-copy.json")
    (tmp_path / f"{stem}.json").write_text(json.dumps(old))
    fresh = measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)
    assert fresh.fp32_flops_per_s > 1e8
    assert len(list(tmp_path.glob("*__gemm-conv3x3-copy.json"))) == 1


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
