"""Each timed cycle's samples/s, FLOP/s and MFU by Lightning's ``Throughput``; hpml's median and
IQR over the cycles (one stalled step moves a window's mean, not the median), MFU against the
datasheet's and a measured peak, each rank's figures its own."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lightning.fabric.utilities.throughput import Throughput

from hpml.analysis.stats import iqr


@dataclass(frozen=True)
class Rates:
    """One rank's figures over a stage's timed cycles: medians over cycles, and an IQR."""

    samples_per_s: float
    samples_iqr_per_s: float
    flops_per_s: float | None = None  # None without a FLOP count
    mfu_pct: dict[str, float] = field(default_factory=dict)  # by peak: table, measured


def cycle_rates(
    samples: Sequence[int],
    cycles: Sequence[float],
    flops_per_sample: float | None = None,
    peaks: Mapping[str, float] | None = None,
) -> Rates | None:
    """Each cycle's rates by Lightning's ``Throughput`` (``samples[i]`` in ``cycles[i]``
    seconds); their medians, MFU for each of ``peaks``. None without cycles."""
    if not cycles:
        return None
    counted = flops_per_sample is not None
    meters = [
        (kind, Throughput(available_flops=peak, window_size=2))
        for kind, peak in (peaks or {}).items()
        if counted and peak
    ] or [(None, Throughput(window_size=2))]
    series: dict[str, list[float]] = {"samples": [], "flops": []}
    for _, meter in meters:
        meter.update(time=0.0, batches=0, samples=0, flops=0 if counted else None)
    elapsed, seen = 0.0, 0
    for batches, (n, cycle) in enumerate(zip(samples, cycles, strict=True), 1):
        elapsed, seen = elapsed + cycle, seen + n
        flops = flops_per_sample * n if flops_per_sample is not None else None
        for kind, meter in meters:
            meter.update(time=elapsed, batches=batches, samples=seen, flops=flops)  # type: ignore
            figures = meter.compute()
            if kind is not None:
                series.setdefault(kind, []).append(100.0 * figures["device/mfu"])
        series["samples"].append(figures["device/samples_per_sec"])
        if counted:
            series["flops"].append(figures["device/flops_per_sec"])
    return Rates(
        samples_per_s=statistics.median(series["samples"]),
        samples_iqr_per_s=iqr(series["samples"]),
        flops_per_s=statistics.median(series["flops"]) if counted else None,
        mfu_pct={kind: statistics.median(series[kind]) for kind, _ in meters if kind is not None},
    )
