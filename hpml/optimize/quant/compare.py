"""Measure one variant of a model (fp32, int8, compiled): size, latency, accuracy, device.

Shared by the quantisation and compilation callbacks and the bench, so "before" and "after" are
measured by the same code. Plain PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from hpml.analysis.latency import LatencyStats, measure_latency
from hpml.analysis.model_stats import state_dict_bytes
from hpml.names import BYTES, MS, NATS, PCT, metric


@dataclass
class Variant:
    """What one variant measured; ``metrics(stage)`` names it ``<stage>/<quantity>_<unit>``."""

    device: str
    size_bytes: int
    latency: dict[int, LatencyStats] = field(default_factory=dict)
    accuracy: float | None = None
    loss: float | None = None

    def metrics(self, stage: str) -> dict[str, float]:
        out: dict[str, float] = {metric(stage, "size", BYTES): float(self.size_bytes)}
        for batch, stats in self.latency.items():
            out[metric(stage, f"latency_b{batch}", MS)] = stats.median_ms
            out[metric(stage, f"latency_b{batch}_p90", MS)] = stats.p90_ms
        if self.accuracy is not None:
            out[metric(stage, "val_acc", PCT)] = 100.0 * self.accuracy
        if self.loss is not None:
            out[metric(stage, "val_loss", NATS)] = self.loss  # mean cross-entropy per sample
        return out


def evaluate(
    net: nn.Module,
    batches: Iterable[Any],
    device: torch.device,
    criterion: Callable[..., torch.Tensor] | None = None,
) -> tuple[float | None, float | None]:
    """Top-1 accuracy and mean loss of a classifier over ``(x, y)`` batches; (None, None) when
    the net's output is not one row of logits per sample."""
    criterion = criterion or F.cross_entropy
    correct = total = 0
    loss_sum = 0.0
    was_training = net.training
    net.eval()
    try:
        with torch.inference_mode():
            for x, y in batches:
                out = net(x.to(device))
                if not (
                    isinstance(out, torch.Tensor) and out.ndim == 2 and not y.is_floating_point()
                ):
                    return None, None
                out, y = out.float().cpu(), y.cpu()
                loss_sum += float(criterion(out, y)) * len(y)
                correct += int((out.argmax(1) == y).sum())
                total += len(y)
    finally:
        net.train(was_training)
    if total == 0:
        return None, None
    return correct / total, loss_sum / total


def measure(
    net: nn.Module,
    example: Callable[[int], Any],
    batch_sizes: Sequence[int],
    device: torch.device,
    rounds: int = 20,
    warmup: int = 3,
    batches: Sequence[Any] = (),
    criterion: Callable[..., torch.Tensor] | None = None,
) -> Variant:
    """Size of the saved state dict, median latency per batch size, accuracy and loss."""
    variant = Variant(str(device), state_dict_bytes(net))
    for batch in dict.fromkeys(batch_sizes):
        inputs = example(batch)
        inputs = inputs.to(device) if isinstance(inputs, torch.Tensor) else inputs
        variant.latency[batch] = measure_latency(net, inputs, rounds, warmup)
    if batches:
        variant.accuracy, variant.loss = evaluate(net, batches, device, criterion)
    return variant
