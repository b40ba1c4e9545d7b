"""Peaks measured by micro-benchmarks, for devices the datasheet table lacks (CPUs, unlisted
GPUs): compute in the dtype a run computes in (fp32, bf16, fp16), copy bandwidth; torch is
imported only inside the functions that use it, as in the table."""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpml.analysis.devices import (
    DTYPES,
    KNOWN_DEVICES,
    DevicePeak,
    device_name,
    fp32_precision,
    table_peak,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import torch

    from hpml.analysis.roofline import RooflinePoint

MIB = 1 << 20
MEASURED_PREFIX = "measured on "  # how a measured peak's source begins
RELOAD_LOAD_DROP = 1.0  # re-measure a cached peak once the 1-minute load is this much lower
# 3x3 convolutions, stride 1, padding 1, as (channels in = out, height = width): VGG's middle and
# late stages, where mkldnn / cuDNN reach rates a square GEMM may not (the batch is sized to fit)
CONV_SHAPES = ((128, 32), (256, 16), (512, 8))
MEASURED = "gemm-conv3x3-copy"  # what a record holds, in its file name: other sets are not reused
READ_BACK = ("name", "taken_in", "flops_per_s", "memory_bytes_per_s", "source")  # of a record


def taken_in(dtype: str, device: torch.device) -> str:
    """What a peak in ``dtype`` is measured in, as its record and the run's tag name it:
    ``bf16``; for fp32 also what tf32 (or bf16) may do: ``fp32 (matmul tf32, conv tf32)``."""
    if dtype not in DTYPES:
        raise ValueError(f"no measured peak in {dtype!r}: expected one of {', '.join(DTYPES)}")
    if dtype != "fp32":
        return dtype
    return f"fp32 ({', '.join(f'{op} {how}' for op, how in fp32_precision(device).items())})"


@dataclass(frozen=True)
class ComputePeak:
    """A compute peak measured in one dtype (FLOP/s, 2 x MAC): what MFU of a run in that dtype
    is against."""

    taken_in: str  # the dtype, and for fp32 its matmuls' and convolutions' settings
    flops_per_s: float
    source: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def _best_seconds(
    work: Callable[[], Any], device: torch.device, budget_s: float, min_repeats: int = 3
) -> float:
    """Shortest of repeated timings of ``work`` (after one untimed call), until ``budget_s`` (at
    most 50 repeats): best-of, not median, as other load only ever slows a repeat down."""
    from hpml.analysis.timing import call_seconds

    work()
    best, spent, repeats = float("inf"), 0.0, 0
    while repeats < min_repeats or (spent < budget_s and repeats < 50):
        [elapsed] = call_seconds(work, 1, device)
        best, spent, repeats = min(best, elapsed), spent + elapsed, repeats + 1
    return best


def _sized_flops_per_s(
    make: Callable[[int], tuple[Callable[[], Any], float]],
    sizes: Sequence[int],
    device: torch.device,
    budget_s: float,
) -> tuple[float, int]:
    """FLOP/s of the work ``make(size)`` returns (with its FLOPs), and the size used: the
    first of ``sizes`` whose call takes an eighth of the budget."""
    for size in sizes:
        work, flops = make(size)
        if _best_seconds(work, device, 0.0, min_repeats=1) >= budget_s / 8:
            break
    return flops / _best_seconds(work, device, budget_s), size


def _gemm_flops_per_s(
    device: torch.device, dtype: torch.dtype, budget_s: float
) -> tuple[float, int]:
    """``n x n @ n x n`` FLOP/s in ``dtype`` (2 n^3 FLOPs per product) and the ``n`` used
    (256-8192)."""
    import torch

    def make(n: int) -> tuple[Callable[[], Any], float]:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        return lambda: a @ b, 2.0 * n**3

    return _sized_flops_per_s(make, (256, 512, 1024, 2048, 4096, 8192), device, budget_s)


def _conv_flops_per_s(
    device: torch.device, dtype: torch.dtype, channels: int, size: int, budget_s: float
) -> tuple[float, int]:
    """3x3 convolution FLOP/s in ``dtype`` (2 x MAC) and the batch used, through ``F.conv2d``
    in inference mode: the kernels a model's conv layers run."""
    import torch
    import torch.nn.functional as F

    weight = torch.randn(channels, channels, 3, 3, device=device, dtype=dtype)

    def make(batch: int) -> tuple[Callable[[], Any], float]:
        x = torch.randn(batch, channels, size, size, device=device, dtype=dtype)

        def work() -> Any:
            with torch.inference_mode():
                return F.conv2d(x, weight, padding=1)

        return work, 2.0 * batch * channels**2 * 9 * size * size

    return _sized_flops_per_s(make, (1, 2, 4, 8, 16, 32, 64, 128, 256), device, budget_s)


def _copy_bytes_per_s(device: torch.device, budget_s: float) -> tuple[float, int]:
    """Bytes per second of ``dst.copy_(src)`` of a tensor larger than any cache, counting
    bytes read + bytes written as STREAM's "copy" does."""
    import torch

    size = (1024 if device.type == "cuda" else 256) * MIB
    src = torch.ones(size // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * size / _best_seconds(lambda: dst.copy_(src), device, budget_s), size


def _record(
    device: torch.device, cache_dir: Path | str, dtype: str, seconds: float, refresh: bool
) -> dict[str, Any]:
    """The cached record of ``device``'s peaks in ``dtype``, measured (and stored) if there is
    none for this host, thread count and what the dtype is taken in, if it is damaged, if the
    1-minute load is now lower by more than ``RELOAD_LOAD_DROP`` (load only lowers a peak), or
    if ``refresh``."""
    import torch

    name, host, threads = device_name(device), socket.gethostname(), torch.get_num_threads()
    label = taken_in(dtype, device)
    stem = f"{_slug(host)}__{_slug(name)}__{threads}threads__{_slug(label)}__{MEASURED}"
    path = Path(cache_dir) / f"{stem}.json"
    load = os.getloadavg()
    if path.is_file() and not refresh:
        try:
            cached = json.loads(path.read_text())
            quieter = cached["load_avg_1m_5m_15m"][0] > load[0] + RELOAD_LOAD_DROP
            if all(k in cached for k in READ_BACK) and cached["taken_in"] == label and not quieter:
                return cached
        except (ValueError, KeyError, TypeError, IndexError):
            pass  # a damaged record is measured again and overwritten
    # the operands are random: drawn from a fork, so a training that measures mid-run draws
    # the same numbers (noise, dropout) whether the record was cached or not; outside any
    # autocast the run is in, so each benchmark computes in its own dtype
    with (
        torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
        torch.autocast(device.type, enabled=False),
    ):
        kind = getattr(torch, DTYPES[dtype])
        gemm, n = _gemm_flops_per_s(device, kind, seconds / 3)
        compute = {f"gemm n={n}": gemm}
        for channels, side in CONV_SHAPES:
            budget = seconds / 3 / len(CONV_SHAPES)
            conv, batch = _conv_flops_per_s(device, kind, channels, side, budget)
            compute[f"conv3x3 {channels}->{channels} {side}x{side} batch {batch}"] = conv
    best = max(compute, key=compute.__getitem__)
    bytes_per_s, size = _copy_bytes_per_s(device, seconds / 3)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = " ".join(f"{x:.2f}" for x in load)
    record = {
        "name": f"{name} (measured)",
        "taken_in": label,
        "flops_per_s": compute[best],
        "memory_bytes_per_s": bytes_per_s,
        "source": f"{MEASURED_PREFIX}{host} {when}: {label} {best} (best of GEMM and conv "
        f"micro-benchmarks), copy of {size // MIB} MiB (read + write bytes), best of repeats, "
        f"{threads} torch threads, load average {loads}",
        "dtype": dtype,
        "fp32_precision": fp32_precision(device),
        "host": host,
        "device": name,
        "device_type": device.type,
        "torch_threads": threads,
        "load_avg_1m_5m_15m": list(load),
        "measured": MEASURED,
        "compute_flops_per_s": compute,
        "gemm_n": n,
        "copy_tensor_bytes": size,
        "copy_bytes_convention": "read + written (2 x tensor bytes)",
        "seconds_budget": seconds,
        "measured_at": when,
        "torch_version": torch.__version__,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(path)  # atomic: a concurrent run reads the old record or the new, never half
    return record


def measure_compute(
    device: torch.device,
    cache_dir: Path | str,
    dtype: str = "fp32",
    seconds: float = 1.0,
    refresh: bool = False,
) -> ComputePeak:
    """Measured compute peak of ``device`` in ``dtype`` (a ``DTYPES`` key), cached across runs:
    the best of a GEMM and 3x3 convolutions in that dtype; fp32 under torch's fp32 matmul and
    convolution settings in force (tf32 where they allow it), each setting its own record.

    Args:
        seconds: the benchmarks' budget, a third each for GEMM, convolutions and copy.
        refresh: measure even if a record exists.
    """
    record = _record(device, cache_dir, dtype, seconds, refresh)
    return ComputePeak(record["taken_in"], record["flops_per_s"], record["source"])


def measure_peak(
    device: torch.device, cache_dir: Path | str, seconds: float = 1.0, refresh: bool = False
) -> DevicePeak:
    """Measured fp32 compute peak and copy bandwidth of ``device``, cached across runs: the
    roof of a roofline, sharing its record with :func:`measure_compute` in fp32.

    The compute peak is the best of an fp32 GEMM and 3x3 convolutions: a roof must bound every
    layer, and mkldnn's convolutions can beat its GEMM on a CPU.

    Args:
        seconds: the benchmarks' budget, a third each for GEMM, convolutions and copy.
        refresh: measure even if a record exists.
    """
    record = _record(device, cache_dir, "fp32", seconds, refresh)
    return DevicePeak(
        name=record["name"],
        fp32_flops_per_s=record["flops_per_s"],
        tf32_flops_per_s=None,
        fp16_flops_per_s=None,
        bf16_flops_per_s=None,
        memory_bytes_per_s=record["memory_bytes_per_s"],
        source=record["source"],
    )


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


def is_measured(peak: DevicePeak) -> bool:
    """Whether ``peak`` came from ``measure_peak`` (a roof that can be re-taken), not a table."""
    return peak.source.startswith(MEASURED_PREFIX)


def raise_roof(
    peak: DevicePeak, points: Sequence[RooflinePoint], precision: str = "32-true"
) -> DevicePeak:
    """``peak`` lifted so that no timed point lies above it, each lift named in ``name`` and
    ``source``: the last resort for a measured roof a point still beats after measuring again."""
    compute, bandwidth = peak.peak_for_precision(precision), peak.memory_bytes_per_s
    timed = [p for p in points if p.flops_per_s and p.intensity > 0]
    fastest = max(timed, key=lambda p: p.flops_per_s or 0.0, default=None)
    densest = max(timed, key=lambda p: (p.flops_per_s or 0.0) / p.intensity, default=None)
    notes, changes = [], {}
    if fastest is not None and (fastest.flops_per_s or 0.0) > compute:
        changes["fp32_flops_per_s"] = fastest.flops_per_s
        notes.append(f"compute raised to {fastest.label}'s {fastest.flops_per_s:.4g} FLOP/s")
    if densest is not None and (densest.flops_per_s or 0.0) / densest.intensity > bandwidth:
        changes["memory_bytes_per_s"] = (densest.flops_per_s or 0.0) / densest.intensity
        notes.append(
            f"bandwidth raised to {densest.label}'s {changes['memory_bytes_per_s']:.4g} B/s"
        )
    if not notes:
        return peak
    return replace(
        peak,
        name=f"{peak.name}, raised to the best point",
        source=f"{peak.source}; {', '.join(notes)} (the micro-benchmarks measured less)",
        **changes,
    )
