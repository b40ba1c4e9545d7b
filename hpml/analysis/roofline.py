"""Roofline analysis: arithmetic intensity and achieved FLOP/s of each layer and of the model.

Conventions (every number below follows them):

- FLOPs: ``hpml.analysis.flops.count_flops``, 2 x multiply-accumulate, conv and matmul only
  (element-wise layers count 0 and so sit at intensity 0: pure data movement).
- Bytes: the *minimum* a layer must move if nothing stays in cache between layers: every
  tensor it is given + its parameters and buffers + every tensor it returns, at each tensor's
  own element size, summed over calls. Measured with forward hooks on leaf modules over one
  batch. The model's bytes are the sum over its leaf layers (the no-reuse-across-layers
  bound). Weights + input + output of the whole model would be a lower bound only a cache
  holding every activation reaches; VGG's activations at 224x224 are tens of MB per layer,
  far beyond any cache, so they do round-trip DRAM and the layer sum is the figure Nsight
  Compute's DRAM bytes come close to. Functional ops outside leaf modules (ResNet's residual
  add, ``torch.flatten`` in a ``forward``) are not hooked, so their bytes are left out.
- Intensity = FLOPs / bytes (FLOP/byte); performance = FLOPs / seconds (FLOP/s).
- Times: best of a few inference passes (eval mode, ``torch.inference_mode``), after one
  warm-up pass. Per-layer times come from forward pre/post hooks; on CUDA each hook
  synchronises the device, which serialises the pipeline and makes small layers look slower
  than they are. The model's time is a whole forward pass without hooks.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from hpml.analysis.devices import DevicePeak
from hpml.analysis.flops import FlopCount, count_flops
from hpml.tensors import first_tensor, tensors_in

Bound = Literal["memory-bound", "compute-bound"]


@dataclass(frozen=True)
class RooflinePoint:
    """One point: FLOPs and minimum bytes of some work, and its time if it was measured."""

    label: str
    flops: float
    bytes: float
    seconds: float | None = None
    kind: str = ""  # the module type of a layer ("Conv2d"), empty for other points

    @property
    def intensity(self) -> float:
        """FLOP/byte; 0 for work that moves bytes and does no counted FLOPs."""
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP/s, or None if the point was not timed."""
        return self.flops / self.seconds if self.seconds else None


@dataclass(frozen=True)
class RooflineAnalysis:
    """Per-layer points (leaf modules that ran, in call order) and the whole model's point."""

    layers: list[RooflinePoint]
    model: RooflinePoint
    batch_size: int

    @property
    def bytes_per_sample(self) -> float:
        return self.model.bytes / self.batch_size

    @property
    def flops_per_sample(self) -> float:
        return self.model.flops / self.batch_size


def attainable_flops_per_s(intensity: float, peak: DevicePeak, precision: str = "32-true") -> float:
    """The roof at ``intensity``: min(compute peak, bandwidth x intensity), in FLOP/s."""
    return min(peak.peak_for_precision(precision), peak.memory_bytes_per_s * intensity)


def classify(point: RooflinePoint, peak: DevicePeak, precision: str = "32-true") -> Bound:
    """Memory-bound left of the ridge point (intensity below it), compute-bound at or right."""
    if point.intensity < peak.ridge_for_precision(precision):
        return "memory-bound"
    return "compute-bound"


def _nbytes(obj: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_in(obj))


def leaf_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules without children, by path (``features.0``): the layers a roofline shows."""
    return {
        name: module
        for name, module in model.named_modules()
        if name and next(module.children(), None) is None
    }


@contextmanager
def _inference(model: nn.Module) -> Iterator[None]:
    """Eval mode and no autograd for the duration; the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def _call(model: nn.Module, example: Any) -> Any:
    return model(*example) if isinstance(example, tuple) else model(example)


def layer_bytes(model: nn.Module, example: Any) -> dict[str, int]:
    """Minimum bytes each leaf module moves in ``model(example)``: inputs + params + buffers +
    outputs, summed over its calls; in call order, leaves that did not run left out."""
    moved: dict[str, int] = {}

    def hook(name: str):
        def record(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            state = [*module.parameters(), *module.buffers()]
            moved[name] = (
                moved.get(name, 0)
                + _nbytes(args)
                + _nbytes(kwargs)
                + _nbytes(state)
                + _nbytes(output)
            )

        return record

    handles = [
        m.register_forward_hook(hook(name), with_kwargs=True)
        for name, m in leaf_modules(model).items()
    ]
    try:
        with _inference(model):
            _call(model, example)
    finally:
        for handle in handles:
            handle.remove()
    return moved


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_of(model: nn.Module, example: Any) -> torch.device:
    first = first_tensor(example)
    if first is not None:
        return first.device
    return next(model.parameters()).device


def layer_seconds(model: nn.Module, example: Any, passes: int = 3) -> dict[str, float]:
    """Seconds each leaf module takes per forward pass, best of ``passes`` (after a warm-up).

    Times run from a forward pre-hook to the forward hook (``perf_counter``; the device is
    synchronised in both on CUDA, which perturbs what it measures: see the module docstring).
    """
    device = _device_of(model, example)
    starts: dict[str, float] = {}
    current: dict[str, float] = {}

    def before(name: str):
        def mark(module: nn.Module, args: tuple) -> None:
            _sync(device)
            starts[name] = time.perf_counter()

        return mark

    def after(name: str):
        def stop(module: nn.Module, args: tuple, output: Any) -> None:
            _sync(device)
            current[name] = current.get(name, 0.0) + time.perf_counter() - starts[name]

        return stop

    handles = []
    for name, module in leaf_modules(model).items():
        handles.append(module.register_forward_pre_hook(before(name)))
        handles.append(module.register_forward_hook(after(name)))
    best: dict[str, float] = {}
    try:
        with _inference(model):
            for index in range(passes + 1):
                current.clear()
                _call(model, example)
                if index == 0:
                    continue  # warm-up: allocator, kernel selection, caches
                for name, seconds in current.items():
                    best[name] = min(best.get(name, float("inf")), seconds)
    finally:
        for handle in handles:
            handle.remove()
    return best


def forward_seconds(model: nn.Module, example: Any, passes: int = 3) -> float:
    """Seconds of one whole forward pass without hooks, best of ``passes`` after a warm-up."""
    device = _device_of(model, example)
    best = float("inf")
    with _inference(model):
        for index in range(passes + 1):
            _sync(device)
            start = time.perf_counter()
            _call(model, example)
            _sync(device)
            if index:
                best = min(best, time.perf_counter() - start)
    return best


def analyse(
    model: nn.Module, example: Any, timing_passes: int = 3, flops: FlopCount | None = None
) -> RooflineAnalysis:
    """Roofline points of ``model(example)``: one per leaf layer that ran, and the model's.

    ``flops`` (from ``count_flops(model, example)``) is counted here if not given. With
    ``timing_passes=0`` nothing is timed (and a model on the meta device can be analysed).
    """
    if flops is None:
        flops = count_flops(model, example)
    moved = layer_bytes(model, example)
    seconds = layer_seconds(model, example, timing_passes) if timing_passes else {}
    leaves = leaf_modules(model)
    layers = [
        RooflinePoint(
            name,
            float(flops.by_module.get(name, 0)),
            float(nbytes),
            seconds.get(name),
            type(leaves[name]).__name__,
        )
        for name, nbytes in moved.items()
    ]
    model_seconds = forward_seconds(model, example, timing_passes) if timing_passes else None
    model_point = RooflinePoint(
        "model (forward)", float(flops.total), float(sum(moved.values())), model_seconds
    )
    return RooflineAnalysis(layers, model_point, flops.batch_size)


CSV_COLUMNS = (
    "layer",
    "type",
    "flops",
    "bytes",
    "intensity_flop_per_byte",
    "seconds",
    "flops_per_s",
    "bound",
)


def points_csv(points: list[RooflinePoint], peak: DevicePeak, precision: str = "32-true") -> str:
    """CSV text, one row per point, with the units in the column names; blank = not timed."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in points:
        writer.writerow(
            [
                p.label,
                p.kind,
                int(p.flops),
                int(p.bytes),
                f"{p.intensity:.6g}",
                "" if p.seconds is None else f"{p.seconds:.6g}",
                "" if p.flops_per_s is None else f"{p.flops_per_s:.6g}",
                classify(p, peak, precision),
            ]
        )
    return out.getvalue()


def _si(value: float, unit: str) -> str:
    """``1.57e13, "FLOP/s"`` -> ``"15.7 TFLOP/s"``."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def describe_peak(peak: DevicePeak, precision: str = "32-true") -> str:
    """``"Tesla V100 SXM2: 15.7 TFLOP/s (32-true), 900 GB/s, ridge 17.4 FLOP/byte"``."""
    return (
        f"{peak.name}: {_si(peak.peak_for_precision(precision), 'FLOP/s')} ({precision}), "
        f"{_si(peak.memory_bytes_per_s, 'B/s')}, "
        f"ridge {peak.ridge_for_precision(precision):.3g} FLOP/byte"
    )


def plot_roofline(
    points: list[RooflinePoint],
    peak: DevicePeak,
    path_stem: Path | str,
    precision: str = "32-true",
    title: str | None = None,
) -> list[Path]:
    """Log-log roofline with ``points`` on it; writes ``<path_stem>.png`` and ``.svg``.

    Timed points sit at their achieved FLOP/s (filled); untimed ones are drawn hollow on the
    roof, at the best their intensity allows. Colour says memory- or compute-bound. Points
    with no counted FLOPs (intensity 0) cannot be placed on log axes and are left out.
    Uses matplotlib's ``Figure`` directly (Agg canvas), never pyplot: no display, no global
    state, safe in callbacks and threads.
    """
    import numpy as np
    from matplotlib.figure import Figure

    compute = peak.peak_for_precision(precision)
    bandwidth = peak.memory_bytes_per_s
    ridge = compute / bandwidth
    drawn = [p for p in points if p.flops > 0 and p.bytes > 0]
    heights = [p.flops_per_s or attainable_flops_per_s(p.intensity, peak, precision) for p in drawn]
    intensities = [p.intensity for p in drawn] + [ridge]
    x_lo, x_hi = min(intensities) / 4, max(intensities) * 4
    y_lo = min([bandwidth * x_lo, *heights]) / 2
    fig = Figure(figsize=(9, 6), layout="constrained")
    ax = fig.add_subplot()
    x = np.geomspace(x_lo, x_hi, 256)
    ax.plot(
        x,
        np.minimum(compute, bandwidth * x),
        color="black",
        linewidth=2,
        label=f"roof: {_si(compute, 'FLOP/s')} ({precision}), {_si(bandwidth, 'B/s')}",
    )
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    ax.annotate(
        f"ridge {ridge:.3g} FLOP/byte",
        (ridge, y_lo),
        xytext=(4, 4),
        textcoords="offset points",
        fontsize=8,
        color="grey",
    )
    ax.annotate(
        f"compute peak {_si(compute, 'FLOP/s')}",
        (x_hi, compute),
        xytext=(-4, -12),
        textcoords="offset points",
        fontsize=8,
        ha="right",
    )
    slope_x = (x_lo * ridge) ** 0.5
    ax.annotate(
        f"memory {_si(bandwidth, 'B/s')}",
        (slope_x, bandwidth * slope_x),
        xytext=(-6, 6),
        textcoords="offset points",
        fontsize=8,
        ha="right",
        rotation=25,
        rotation_mode="anchor",
    )
    colours = {"memory-bound": "tab:blue", "compute-bound": "tab:red"}
    labelled: set[str] = set()
    for point, height in zip(drawn, heights, strict=True):
        bound = classify(point, peak, precision)
        timed = point.flops_per_s is not None
        legend = f"{bound}{'' if timed else ' (not timed: on its roof)'}"
        ax.scatter(
            point.intensity,
            height,
            s=40,
            zorder=3,
            edgecolors=colours[bound],
            facecolors=colours[bound] if timed else "none",
            label=None if legend in labelled else legend,
        )
        labelled.add(legend)
        if timed:
            ax.annotate(
                point.label,
                (point.intensity, height),
                xytext=(4, -3),
                textcoords="offset points",
                fontsize=7,
            )
        else:  # points on the roof line up: slanted labels above it fan out
            ax.annotate(
                point.label,
                (point.intensity, height),
                xytext=(0, 6),
                textcoords="offset points",
                fontsize=7,
                rotation=60,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, max([compute, *heights]) * 3)  # a noisy measured peak can be beaten
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (FLOP/s)")
    ax.set_title(title or f"Roofline on {peak.name}", fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [Path(f"{stem}.png"), Path(f"{stem}.svg")]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    return paths
