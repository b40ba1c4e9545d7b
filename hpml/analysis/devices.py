"""Datasheet peak compute and memory bandwidth of devices: the roofs that MFU and rooflines use.

``KNOWN_DEVICES`` holds vendor datasheet figures for common NVIDIA accelerators, each saying
where its numbers come from (``DevicePeak.source``). All are *dense* peaks: NVIDIA quotes
Ampere-and-later tensor-core figures "with sparsity", which are twice the dense rate, so those
are halved here. Peaks are per CUDA device (one K80 board is two). Devices not in the table are
measured instead (``hpml.analysis.measured_peak``). torch is imported only where a function needs
it, so command-line tools list the table without importing it.
"""

from __future__ import annotations

import contextlib
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

T = 1e12  # TFLOP/s
GB = 1e9  # GB/s (decimal, as datasheets quote bandwidth)

FP32 = ("32", "32-true")
FP16 = ("16", "16-mixed", "16-true")
BF16 = ("bf16", "bf16-mixed", "bf16-true")
FP64 = ("64", "64-true")  # no table figure: held to the fp32 peak, which bounds it everywhere
PRECISIONS = FP32 + FP16 + BF16  # the Lightning precision settings a peak is known for
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # torch's name of each


@dataclass(frozen=True)
class DevicePeak:
    """Dense peak throughputs of one device, in FLOP/s and bytes/s, and where they come from.

    ``fp16_flops_per_s`` and ``bf16_flops_per_s`` are the dense tensor-core rates with fp32
    accumulation (what mixed precision uses); None where the device has no such units.
    """

    name: str
    fp32_flops_per_s: float
    tf32_flops_per_s: float | None
    fp16_flops_per_s: float | None
    bf16_flops_per_s: float | None
    memory_bytes_per_s: float
    source: str

    def peak_for_precision(
        self, precision: str | int = "32-true", tf32: bool | None = None
    ) -> float:
        """The compute roof for a Lightning ``precision`` setting, in FLOP/s.

        ``"32-true"``: the tf32 peak when ``tf32`` and the device has tf32 units, else fp32;
        ``tf32`` defaults to whether float32 work may run on tf32 tensor cores: matmuls once
        ``torch.set_float32_matmul_precision("high")`` turned them on, convolutions (and cuDNN's
        RNNs) by cuDNN's default, ``torch.backends.cudnn.allow_tf32``: a roof must bound every
        layer. ``"16-mixed"``/``"16-true"``: the fp16 tensor peak;
        ``"bf16-mixed"``/``"bf16-true"``: the bf16 one. A device without those units is held to
        its fp32 peak, as ``"64-true"`` is (a bound: no fp64 rate exceeds the fp32 one). Other
        settings (``"transformer-engine"``) have no figure here: ValueError.
        """
        text = str(precision)
        if text in FP32:
            if tf32 is None:
                import torch

                tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32
            return (
                self.tf32_flops_per_s if tf32 and self.tf32_flops_per_s else self.fp32_flops_per_s
            )
        if text in FP64:  # float64 never runs on tf32 units
            return self.fp32_flops_per_s
        if text in FP16:
            return self.fp16_flops_per_s or self.fp32_flops_per_s
        if text in BF16:
            return self.bf16_flops_per_s or self.fp32_flops_per_s
        raise ValueError(f"no peak for precision {text!r}: expected one of {', '.join(PRECISIONS)}")

    def ridge_for_precision(
        self, precision: str | int = "32-true", tf32: bool | None = None
    ) -> float:
        """Ridge point (FLOP/byte) under the compute roof of ``precision``."""
        return self.peak_for_precision(precision, tf32) / self.memory_bytes_per_s


def _peak(
    name: str,
    fp32: float,
    memory: float,
    source: str,
    tf32: float | None = None,
    fp16: float | None = None,
    bf16: float | None = None,
) -> DevicePeak:
    """A table entry from figures in TFLOP/s and GB/s, as datasheets print them."""
    return DevicePeak(
        name, fp32 * T, tf32 and tf32 * T, fp16 and fp16 * T, bf16 and bf16 * T, memory * GB, source
    )


_SPARSE_HALVED = "; tensor figures are the datasheet's 'with sparsity' values halved (dense)"


def _datasheet(product: str) -> str:
    """The source of an Ampere-or-later entry: its datasheet page, sparse figures halved."""
    page = f"https://www.nvidia.com/en-us/data-center/{product.lower()}/"
    return f"NVIDIA {product} datasheet, {page}{_SPARSE_HALVED}"


_A100 = {"tf32": 156, "fp16": 312, "bf16": 312}
_HOPPER_SXM = {"tf32": 494.5, "fp16": 989.5, "bf16": 989.5}
_P100 = "NVIDIA Tesla P100 datasheet (fp16: native half2 rate)"
_V100 = "NVIDIA Tesla V100 datasheet, https://www.nvidia.com/en-us/data-center/v100/"

KNOWN_DEVICES: dict[str, DevicePeak] = {
    "k80": _peak(
        "Tesla K80 (one GK210)",
        4.37,
        240,
        "NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s fp32 with GPU Boost and 480 GB/s per "
        "board of two GK210 GPUs, halved per CUDA device",
    ),
    "p40": _peak("Tesla P40", 12.0, 346, "NVIDIA Tesla P40 datasheet"),
    "p100-sxm2": _peak(
        "Tesla P100 SXM2",
        10.6,
        732,
        "NVIDIA Tesla P100 datasheet (fp16: native half2 rate, no tensor cores)",
        fp16=21.2,
    ),
    "p100-pcie-16gb": _peak("Tesla P100 PCIe 16GB", 9.3, 732, _P100, fp16=18.7),
    "p100-pcie-12gb": _peak("Tesla P100 PCIe 12GB", 9.3, 549, _P100, fp16=18.7),
    "v100": _peak("Tesla V100 SXM2", 15.7, 900, _V100, fp16=125),
    "v100-pcie": _peak("Tesla V100 PCIe", 14.0, 900, _V100, fp16=112),
    "v100s-pcie": _peak("Tesla V100S PCIe", 16.4, 1134, "NVIDIA Tesla V100S datasheet", fp16=130),
    "t4": _peak(
        "Tesla T4",
        8.1,
        320,
        "NVIDIA T4 datasheet, https://www.nvidia.com/en-us/data-center/tesla-t4/",
        fp16=65,
    ),
    "rtx2060-super": _peak(
        "GeForce RTX 2060 SUPER",
        7.18,
        448,
        "NVIDIA RTX 2060 SUPER specifications (2176 CUDA cores x 2 x 1.65 GHz boost; 14 Gbps x "
        "256-bit), https://www.nvidia.com/en-us/geforce/graphics-cards/rtx-2060-super/; fp16: "
        "272 tensor cores x 128 FLOP x 1.65 GHz, halved for fp32 accumulate on GeForce Turing "
        "(NVIDIA Turing architecture whitepaper)",
        fp16=28.7,
    ),
    "a100-40gb": _peak("A100 40GB", 19.5, 1555, _datasheet("A100"), **_A100),
    "a100-80gb": _peak("A100 80GB SXM", 19.5, 2039, _datasheet("A100"), **_A100),
    "a100-80gb-pcie": _peak("A100 80GB PCIe", 19.5, 1935, _datasheet("A100"), **_A100),
    "l4": _peak("L4", 30.3, 300, _datasheet("L4"), tf32=60, fp16=121, bf16=121),
    "h100-sxm": _peak("H100 SXM", 67.0, 3350, _datasheet("H100"), **_HOPPER_SXM),
    "h100-pcie": _peak(
        "H100 PCIe", 51.0, 2000, _datasheet("H100"), tf32=378, fp16=756.5, bf16=756.5
    ),
    "h200": _peak("H200 SXM", 67.0, 4800, _datasheet("H200"), **_HOPPER_SXM),
}

# What torch.cuda.get_device_name() reports for each entry, brand words off (full match).
CUDA_NAMES: dict[str, str] = {
    "k80": r"K80",
    "p40": r"P40",
    "p100-sxm2": r"P100-SXM2-\d+GB",
    "p100-pcie-16gb": r"P100-PCIE-16GB",
    "p100-pcie-12gb": r"P100-PCIE-12GB",
    "v100": r"V100-SXM2-\d+GB",
    "v100-pcie": r"V100-PCIE-\d+GB",
    "v100s-pcie": r"V100S-PCIE-\d+GB",
    "t4": r"T4",
    "rtx2060-super": r"RTX 2060 SUPER",
    "a100-40gb": r"A100-(SXM4|PCIE)-40GB",
    "a100-80gb": r"A100-SXM4-80GB",
    "a100-80gb-pcie": r"A100 80GB PCIE",
    "l4": r"L4",
    "h100-sxm": r"H100 80GB HBM3|H100 SXM5 80GB",
    "h100-pcie": r"H100 PCIE",
    "h200": r"H200",
}


def match_device_name(name: str) -> DevicePeak | None:
    """The table entry for a CUDA device name (``"Tesla V100-SXM2-16GB"``), or None if unknown.

    Names must match a whole pattern, so a variant with other figures (``"H200 NVL"``, ``"RTX
    2060"``) is unknown rather than given a neighbour's peak.
    """
    # vendor and brand words off: "NVIDIA GeForce RTX 2060 SUPER" -> "RTX 2060 SUPER"
    normal = " ".join(w for w in name.upper().split() if w not in ("NVIDIA", "TESLA", "GEFORCE"))
    for key, pattern in CUDA_NAMES.items():
        if re.fullmatch(pattern, normal):
            return KNOWN_DEVICES[key]
    return None


def default_device() -> torch.device:
    """The current GPU where torch sees one, else the CPU (``CUDA_VISIBLE_DEVICES=`` picks the
    CPU on a GPU host): where a bench case times its models and a report measures its roof."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    """CUDA device name, or the CPU's model name as the kernel reports it."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def table_peak(device: torch.device) -> DevicePeak | None:
    """Datasheet peak of a CUDA device; None for CPUs and GPUs not in ``KNOWN_DEVICES``."""
    if device.type != "cuda":
        return None
    return match_device_name(device_name(device))


def precision_dtype(precision: str | int) -> str | None:
    """The dtype (a ``DTYPES`` key) whose measured peak a run at Lightning ``precision`` is
    held to: the one its autocast or weights put matmuls and convolutions in, fp32 for
    ``32-true`` and for ``64-true`` (no fp64 rate exceeds the fp32 one, as the table holds it),
    bf16 for ``bf16-mixed``/``bf16-true``, fp16 for ``16-mixed``/``16-true``; None for settings
    with no such figure (``transformer-engine``)."""
    text = str(precision)
    if text in FP32 + FP64:
        return "fp32"
    return "bf16" if text in BF16 else "fp16" if text in FP16 else None


def fp32_precision(device: torch.device) -> dict[str, str]:
    """What float32 matmuls and convolutions on ``device`` may run at (``ieee``, ``tf32``,
    ``bf16``): torch's ``fp32_precision`` settings of the backend the device uses (cuBLAS and
    cuDNN, else oneDNN), each ``none`` one inheriting its backend's, then the global one."""
    import torch

    b = torch.backends
    if device.type == "cuda":
        chains = {"matmul": (b.cuda.matmul, b.cudnn, b), "conv": (b.cudnn.conv, b.cudnn, b)}
    else:
        chains = {"matmul": (b.mkldnn.matmul, b.mkldnn, b), "conv": (b.mkldnn.conv, b.mkldnn, b)}
    return {
        op: next((s.fp32_precision for s in chain if s.fp32_precision != "none"), "ieee")
        for op, chain in chains.items()
    }
