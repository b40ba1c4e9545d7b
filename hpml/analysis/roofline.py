"""Roofline analysis: arithmetic intensity and achieved FLOP/s of each layer and of the model.

- FLOPs: :func:`hpml.analysis.flops.count_flops` (element-wise layers sit at intensity 0).
- Bytes: the *minimum* a layer moves if nothing stays in cache between layers: its inputs,
  outputs, parameters and buffers, summed over calls (forward hooks on leaf modules); the model's
  are the sum over its leaves (functional ops outside leaf modules are left out).
- Times: best of a few inference passes after one warm-up. Per-layer hooks synchronise CUDA,
  making small layers look slower; the model's time is a whole forward pass without hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hpml.analysis.compare import evaluating, example_device, forward_call
from hpml.analysis.devices import DevicePeak
from hpml.analysis.flops import FlopCount, count_flops
from hpml.analysis.latency import forward_seconds
from hpml.analysis.timing import synchronized_now
from hpml.tensors import tensors_in

Bound = Literal["memory-bound", "compute-bound"]


@dataclass(frozen=True)
class RooflinePoint:
    """One point: FLOPs and bytes of some work, and its time if it was measured.

    Analytic (the default): FLOPs counted from the model, over the minimum bytes it must move.
    ``counted``: FLOPs and DRAM bytes the GPU's own counters counted (Nsight Compute).
    """

    label: str
    flops: float
    bytes: float
    seconds: float | None = None
    kind: str = ""  # the module type of a layer ("Conv2d"), empty for other points
    counted: bool = False

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


def leaf_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules without children, by path (``features.0``): the layers a roofline shows."""
    return {
        name: module
        for name, module in model.named_modules()
        if name and next(module.children(), None) is None
    }


@contextmanager
def _hooked_leaves(
    model: nn.Module, hooks: Callable[[str, nn.Module], list[RemovableHandle]]
) -> Iterator[None]:
    """``model`` in eval mode under ``torch.inference_mode``, with the hooks ``hooks(name,
    leaf)`` registers on each leaf module until the block ends."""
    handles = [handle for name, leaf in leaf_modules(model).items() for handle in hooks(name, leaf)]
    try:
        with evaluating([model]), torch.inference_mode():
            yield
    finally:
        for handle in handles:
            handle.remove()


def layer_bytes(model: nn.Module, example: Any) -> dict[str, int]:
    """Minimum bytes each leaf module moves in ``model(example)``: inputs + params + buffers +
    outputs, summed over its calls; in call order, leaves that did not run left out."""
    moved: dict[str, int] = {}

    def hook(name: str, leaf: nn.Module) -> list[RemovableHandle]:
        def record(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            state = [*module.parameters(), *module.buffers()]
            tensors = tensors_in((args, kwargs, state, output))
            moved[name] = moved.get(name, 0) + sum(t.numel() * t.element_size() for t in tensors)

        return [leaf.register_forward_hook(record, with_kwargs=True)]

    with _hooked_leaves(model, hook):
        forward_call(model, example)()
    return moved


def layer_seconds(model: nn.Module, example: Any, passes: int = 3) -> dict[str, float]:
    """Seconds each leaf module takes per forward pass, best of ``passes`` (after a warm-up),
    from its forward pre-hook to its forward hook (module docstring)."""
    device = example_device(model, example)
    starts: dict[str, float] = {}
    current: dict[str, float] = {}

    def hooks(name: str, leaf: nn.Module) -> list[RemovableHandle]:
        def mark(module: nn.Module, args: tuple) -> None:
            starts[name] = synchronized_now(device)

        def stop(module: nn.Module, args: tuple, output: Any) -> None:
            current[name] = current.get(name, 0.0) + synchronized_now(device) - starts[name]

        return [leaf.register_forward_pre_hook(mark), leaf.register_forward_hook(stop)]

    best: dict[str, float] = {}
    forward = forward_call(model, example)
    with _hooked_leaves(model, hooks):
        forward()  # warm-up: allocator, kernel selection, caches
        for _ in range(passes):
            current.clear()
            forward()
            for name, seconds in current.items():
                best[name] = min(best.get(name, float("inf")), seconds)
    return best


def analyse(
    model: nn.Module, example: Any, timing_passes: int = 3, flops: FlopCount | None = None
) -> RooflineAnalysis:
    """Roofline points of ``model(example)``: one per leaf layer that ran, and the model's.
    ``flops`` is counted here if not given; ``timing_passes=0`` times nothing (meta models)."""
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
    model_seconds = (
        min(forward_seconds(model, example, timing_passes, 1)) if timing_passes else None
    )
    model_point = RooflinePoint(
        "model (forward)", float(flops.total), float(sum(moved.values())), model_seconds
    )
    return RooflineAnalysis(layers, model_point, flops.batch_size)
