"""Device peaks from the datasheet table: CUDA names, dense figures, precision mapping."""

from __future__ import annotations

import pytest
import torch

from hpml.analysis.devices import CUDA_NAMES, KNOWN_DEVICES, match_device_name, table_peak


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
    assert round(v100.ridge_for_precision("32-true", tf32=False), 1) == 17.4
    assert round(a100.ridge_for_precision("32-true", tf32=False), 1) == 12.5
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
    assert a100.peak_for_precision("64-true", tf32=True) == 19.5e12  # fp64: the fp32 bound
    with pytest.raises(ValueError, match="transformer-engine"):
        v100.peak_for_precision("transformer-engine")


def test_fp32_follows_torchs_tf32_settings_for_matmuls_and_convolutions():
    a100 = KNOWN_DEVICES["a100-40gb"]
    before, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        assert a100.peak_for_precision(32) == 19.5e12
        torch.set_float32_matmul_precision("high")  # what Lightning suggests on Ampere: tf32
        assert a100.peak_for_precision("32-true") == 156e12
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = True  # cuDNN's default: convolutions in tf32
        assert a100.peak_for_precision("32-true") == 156e12
    finally:
        torch.set_float32_matmul_precision(before)
        torch.backends.cudnn.allow_tf32 = cudnn


def test_cpu_has_no_table_peak():
    assert table_peak(torch.device("cpu")) is None
