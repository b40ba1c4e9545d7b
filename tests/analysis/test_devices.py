"""Device peaks: datasheet table, CUDA names, precision mapping, the cached micro-benchmark."""

from __future__ import annotations

import json

import pytest
import torch

from hpml.analysis import devices
from hpml.analysis.devices import (
    CUDA_NAMES,
    KNOWN_DEVICES,
    match_device_name,
    measure_peak,
    resolve_peak,
    table_peak,
)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Tesla K80", "k80"),
        ("Tesla P40", "p40"),
        ("Tesla P100-SXM2-16GB", "p100-sxm2"),
        ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
        ("Tesla P100-PCIE-12GB", "p100-pcie-12gb"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("Tesla V100-PCIE-32GB", "v100-pcie"),
        ("Tesla V100S-PCIE-32GB", "v100s-pcie"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 2060 SUPER", "rtx2060-super"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
    ],
)
def test_real_cuda_device_names_find_their_entry(name, key):
    assert match_device_name(name) is KNOWN_DEVICES[key]


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H200 NVL",
        "NVIDIA H100 NVL",
        "NVIDIA GeForce RTX 2060",
        "NVIDIA GeForce RTX 4090",
        "Tesla V100-SXM3-32GB",
        "NVIDIA A10",
        "AMD Instinct MI250X",
        "AMD EPYC",
    ],
)
def test_other_devices_get_no_neighbours_peak(name):
    assert match_device_name(name) is None


def test_every_entry_has_a_name_pattern_a_source_and_dense_figures():
    assert set(CUDA_NAMES) == set(KNOWN_DEVICES)
    for key, peak in KNOWN_DEVICES.items():
        assert peak.source, key
        assert peak.fp32_flops_per_s > 1e12 and peak.memory_bytes_per_s > 1e11, key
        for faster in (peak.tf32_flops_per_s, peak.fp16_flops_per_s, peak.bf16_flops_per_s):
            assert faster is None or faster > peak.fp32_flops_per_s, key


def test_study_5_roofs():
    v100, a100 = KNOWN_DEVICES["v100"], KNOWN_DEVICES["a100-40gb"]
    assert (v100.fp32_flops_per_s, v100.memory_bytes_per_s) == (15.7e12, 900e9)
    assert (a100.fp32_flops_per_s, a100.memory_bytes_per_s) == (19.5e12, 1555e9)
    assert round(v100.ridge_flop_per_byte, 1) == 17.4
    assert round(a100.ridge_flop_per_byte, 1) == 12.5
    assert KNOWN_DEVICES["a100-80gb"].memory_bytes_per_s == 2039e9
    # dense, not the datasheet's "with sparsity" figures
    assert a100.fp16_flops_per_s == 312e12 and KNOWN_DEVICES["h100-sxm"].bf16_flops_per_s < 1e15


def test_precision_picks_the_matching_peak():
    v100, a100, k80 = KNOWN_DEVICES["v100"], KNOWN_DEVICES["a100-40gb"], KNOWN_DEVICES["k80"]
    assert a100.peak_for_precision("32-true", tf32=False) == 19.5e12
    assert a100.peak_for_precision("32-true", tf32=True) == 156e12
    assert v100.peak_for_precision("32-true", tf32=True) == 15.7e12  # no tf32 units
    assert v100.peak_for_precision("16-mixed") == 125e12
    assert a100.peak_for_precision("bf16-mixed") == 312e12
    assert v100.peak_for_precision("bf16-mixed") == 15.7e12  # no bf16 units: fp32 roof
    assert k80.peak_for_precision("16-mixed") == k80.fp32_flops_per_s
    assert v100.ridge_for_precision("16-mixed") == pytest.approx(125e12 / 900e9)
    with pytest.raises(ValueError, match="64-true"):
        v100.peak_for_precision("64-true")


def test_fp32_follows_torchs_tf32_setting():
    a100 = KNOWN_DEVICES["a100-40gb"]
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert a100.peak_for_precision(32) == 19.5e12
        torch.set_float32_matmul_precision("high")  # what Lightning suggests on Ampere: tf32
        assert a100.peak_for_precision("32-true") == 156e12
    finally:
        torch.set_float32_matmul_precision(before)


def test_cpu_has_no_table_peak():
    assert table_peak(torch.device("cpu")) is None


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
    assert path.name.endswith(f"__{torch.get_num_threads()}threads.json")
    record = json.loads(path.read_text())
    assert record["torch_threads"] == torch.get_num_threads()
    assert len(record["load_avg_1m_5m_15m"]) == 3
    assert record["copy_bytes_convention"].startswith("read + written")
    assert record["peak"]["fp32_flops_per_s"] == peak.fp32_flops_per_s


def test_second_call_reads_the_cache_without_measuring(measured, monkeypatch):
    peak, cache = measured

    def fail(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(devices, "_gemm_flops_per_s", fail)
    monkeypatch.setattr(devices.os, "getloadavg", lambda: (99.0, 99.0, 99.0))  # busier now
    assert measure_peak(torch.device("cpu"), cache) == peak
    assert resolve_peak(None, torch.device("cpu"), cache) == peak  # CPU: no table, measured


def test_damaged_or_loaded_records_are_measured_again(tmp_path, measured, monkeypatch):
    _, cache = measured
    (path,) = cache.glob("*.json")
    record = tmp_path / path.name
    record.write_text("{not json")
    again = measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)
    assert json.loads(record.read_text())["peak"]["source"] == again.source
    busy = json.loads(record.read_text()) | {"load_avg_1m_5m_15m": [9.0, 9.0, 9.0]}
    record.write_text(json.dumps(busy))
    monkeypatch.setattr(devices.os, "getloadavg", lambda: (0.5, 0.5, 0.5))  # quieter now
    measure_peak(torch.device("cpu"), tmp_path, seconds=0.05)
    assert json.loads(record.read_text())["load_avg_1m_5m_15m"] == [0.5, 0.5, 0.5]


def test_resolve_peak_by_key_and_unknown_key(tmp_path):
    assert resolve_peak("v100", torch.device("cpu"), tmp_path) is KNOWN_DEVICES["v100"]
    with pytest.raises(ValueError, match=r"unknown device 'v200'.*a100-40gb"):
        resolve_peak("v200", torch.device("cpu"), tmp_path)
