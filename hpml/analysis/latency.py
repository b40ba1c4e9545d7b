"""Inference latency of one model on a fixed input, call by call: the bench's per-variant step
(a run's before/after comparisons use :mod:`hpml.analysis.compare` instead)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hpml.tensors import first_tensor


@dataclass(frozen=True)
class LatencyStats:
    """Milliseconds per forward pass over ``rounds`` timed calls (warm-up calls excluded)."""

    median_ms: float
    rounds: int
    batch_size: int
    device: str


def measure_latency(
    model: nn.Module, example: Any, rounds: int = 20, warmup: int = 3
) -> LatencyStats:
    """Time ``model(example)`` (a tensor or a tuple of inputs) call by call, in eval mode under
    ``torch.inference_mode``."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be at least 1")
    args = example if isinstance(example, tuple) else (example,)
    tensor = first_tensor(example)
    cuda = tensor is not None and tensor.device.type == "cuda"
    was_training = model.training
    model.eval()
    times: list[float] = []
    try:
        with torch.inference_mode():
            for index in range(warmup + rounds):
                start = time.perf_counter()
                model(*args)
                if cuda:
                    torch.cuda.synchronize(tensor.device)
                if index >= warmup:
                    times.append((time.perf_counter() - start) * 1e3)
    finally:
        model.train(was_training)
    return LatencyStats(statistics.median(times), rounds, int(tensor.shape[0]), str(tensor.device))
