"""Peaks measured on this machine, for devices the datasheet table lacks (CPUs, unlisted GPUs).

``measure_peak`` runs a short micro-benchmark (fp32 GEMM and a large copy), cached as JSON per
host, device and thread count, with the load average it ran under; ``resolve_peak`` picks the
table entry (``hpml.analysis.devices``) or the measurement. As in the table, torch is imported
only inside the functions that use it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpml.analysis.devices import KNOWN_DEVICES, DevicePeak, device_name, table_peak

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

MIB = 1 << 20
RELOAD_LOAD_DROP = 1.0  # re-measure a cached peak once the 1-minute load is this much lower


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def _best_seconds(
    work: Callable[[], Any],
    device: torch.device,
    budget_s: float,
    min_repeats: int = 3,
    max_repeats: int = 50,
) -> float:
    """Shortest of repeated timings of ``work`` (after one untimed call), until ``budget_s``.

    Best-of, not median: on a shared machine other load only ever slows a repeat down.
    """
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    work()
    sync()
    best, spent, repeats = float("inf"), 0.0, 0
    while repeats < min_repeats or (spent < budget_s and repeats < max_repeats):
        start = time.perf_counter()
        work()
        sync()
        elapsed = time.perf_counter() - start
        best, spent, repeats = min(best, elapsed), spent + elapsed, repeats + 1
    return best


def _gemm_flops_per_s(device: torch.device, budget_s: float) -> tuple[float, int]:
    """fp32 ``n x n @ n x n`` FLOP/s (2 n^3 FLOPs per product) and the ``n`` used.

    ``n`` doubles from 256 until one product takes an eighth of the budget (or 8192 is reached),
    so the matrix is large enough to run at full rate and the repeats still fit the budget.
    """
    import torch

    for n in (256, 512, 1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
        if _best_seconds(lambda a=a, b=b: a @ b, device, 0.0, min_repeats=1) >= budget_s / 8:
            break
    seconds = _best_seconds(lambda: a @ b, device, budget_s)
    return 2 * n**3 / seconds, n


def _copy_bytes_per_s(device: torch.device, budget_s: float) -> tuple[float, int]:
    """Bytes per second of ``dst.copy_(src)``, counting bytes read + bytes written (2 x size).

    The tensor (256 MiB on CPU, 1 GiB on GPU) is far larger than any cache, so it streams
    through DRAM / HBM; STREAM's "copy" counts bytes the same way.
    """
    import torch

    size = (1024 if device.type == "cuda" else 256) * MIB
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), device, budget_s)
    return 2 * size / seconds, size


def measure_peak(
    device: torch.device, cache_dir: Path | str, seconds: float = 1.0, refresh: bool = False
) -> DevicePeak:
    """Measured fp32 GEMM FLOP/s and copy bandwidth of ``device``, cached across runs.

    About ``seconds`` of benchmarking (half GEMM, half copy), best of the repeats, at torch's
    current thread count and matmul precision (tf32 on CUDA if it is enabled). The record in
    ``cache_dir/<host>__<device>__<threads>threads.json`` keeps the load average the numbers
    were taken under; the next call (this run or a later one) reads it instead of measuring,
    unless the machine is now quieter (1-minute load lower by more than ``RELOAD_LOAD_DROP``):
    other work only lowers a measured peak, so a record taken under load is replaced then.
    """
    import torch

    name = device_name(device)
    host = socket.gethostname()
    threads = torch.get_num_threads()
    path = Path(cache_dir) / f"{_slug(host)}__{_slug(name)}__{threads}threads.json"
    load = os.getloadavg()
    if path.is_file() and not refresh:
        try:
            cached = json.loads(path.read_text())
            if cached["load_avg_1m_5m_15m"][0] <= load[0] + RELOAD_LOAD_DROP:
                return DevicePeak(**cached["peak"])
        except (ValueError, KeyError, TypeError, IndexError):
            pass  # a damaged record is measured again and overwritten
    flops_per_s, n = _gemm_flops_per_s(device, seconds / 2)
    bytes_per_s, size = _copy_bytes_per_s(device, seconds / 2)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = " ".join(f"{x:.2f}" for x in load)
    peak = DevicePeak(
        name=f"{name} (measured)",
        fp32_flops_per_s=flops_per_s,
        tf32_flops_per_s=None,
        fp16_flops_per_s=None,
        bf16_flops_per_s=None,
        memory_bytes_per_s=bytes_per_s,
        source=f"measured on {host} {when}: fp32 GEMM n={n}, copy of {size // MIB} MiB "
        f"(read + write bytes), best of repeats, {threads} torch threads, "
        f"load average {loads}",
    )
    record = {
        "peak": asdict(peak),
        "host": host,
        "device": name,
        "device_type": device.type,
        "torch_threads": threads,
        "load_avg_1m_5m_15m": list(load),
        "gemm_n": n,
        "copy_tensor_bytes": size,
        "copy_bytes_convention": "read + written (2 x tensor bytes)",
        "matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
        "seconds_budget": seconds,
        "measured_at": when,
        "torch_version": torch.__version__,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(path)  # atomic: a concurrent run reads the old record or the new, never half
    return peak


def resolve_peak(
    choice: str | None, device: torch.device, cache_dir: Path | str, seconds: float = 1.0
) -> DevicePeak:
    """The roof to draw: ``choice`` a ``KNOWN_DEVICES`` key or ``"measured"``; None means the
    device's table entry if it has one, else a measured peak."""
    if choice == "measured":
        return measure_peak(device, cache_dir, seconds)
    if choice is not None:
        if choice not in KNOWN_DEVICES:
            raise ValueError(
                f"unknown device {choice!r} (valid: {', '.join(KNOWN_DEVICES)}, measured)"
            )
        return KNOWN_DEVICES[choice]
    return table_peak(device) or measure_peak(device, cache_dir, seconds)
