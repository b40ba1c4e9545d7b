"""Each timed cycle's samples/s, FLOP/s and MFU by Lightning's ``Throughput``; hpml's median and
IQR over the cycles.

Lightning's :class:`~lightning.fabric.utilities.throughput.Throughput` (what its
``ThroughputMonitor`` callbacks log) computes samples/s, FLOP/s and MFU over a window of its
latest updates: the samples (FLOPs) between the window's first and last update over the time
between them. :func:`cycle_rates` gives it the end of every timed cycle of a stage (a cycle: the
wait for a batch plus its step, :meth:`~hpml.analysis.timing.StepTimer.cycle_seconds`) with a
window of two updates, so each of its figures is one cycle's: ``device/samples_per_sec``,
``device/flops_per_sec`` (the cycle's samples x FLOPs per sample) and ``device/mfu`` (that over
the peak it was given; one ``Throughput`` per peak hpml knows, as it takes one).

What hpml adds, and why:

- the reported figure is the **median over cycles** of those rates, with their **IQR**, not a
  mean over a wide window: one stalled step (a collection, a checkpoint write, a neighbour's
  burst) moves a window's samples-over-seconds, not the median, and the IQR says how far
  steps spread. The median over cycles of ``samples x FLOPs per sample / cycle`` is FLOPs per
  sample x the median samples/s, so FLOP/s and MFU stay that product, as before;
- MFU in percent, against two peaks (the datasheet's for the trainer's precision and a measured
  one, :mod:`hpml.analysis.devices`, :mod:`hpml.analysis.measured_peak`), not Lightning's
  ``get_available_flops`` (one datasheet figure, none for CPUs);
- each rank's figures are its own (``world_size=1``): :mod:`hpml.callbacks.perf` sums the ranks'
  (their MFU averaged), where Lightning's global figures are one rank's times the world size;
- no ``items_per_sec``: hpml's batches carry no lengths (images, fixed-length sequences), so
  samples/s is the figure.

The rest of what the performance monitor logs (step time percentiles and CV, data-wait share,
CPU time, utilisation) Lightning does not compute: :class:`~hpml.analysis.timing.StepTimer`.
"""

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
    """Each cycle's rates by Lightning's ``Throughput``; their medians (and the samples/s IQR).

    ``samples[i]`` were processed in ``cycles[i]`` seconds. MFU is given for each of ``peaks``
    (FLOP/s of one device) when ``flops_per_sample`` is known. None without cycles.
    """
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
