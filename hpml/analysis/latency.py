"""Inference latency of one model on a fixed input, call by call: the bench's per-variant step
(a run's before/after comparisons use :mod:`hpml.analysis.compare` instead)."""

from __future__ import annotations

import statistics
from typing import Any

import torch
from torch import nn

from hpml.analysis.compare import evaluating, forward_call
from hpml.analysis.timing import call_seconds
from hpml.tensors import first_tensor


def measure_latency(model: nn.Module, example: Any, rounds: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of ``rounds`` calls of ``model(example)`` (a tensor or a tuple of
    inputs) after ``warmup`` untimed ones, timed call by call in eval mode under
    ``torch.inference_mode``."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be at least 1")
    forward = forward_call(model, example)
    with evaluating([model]), torch.inference_mode():
        times = call_seconds(forward, rounds, first_tensor(example).device, warmup)
    return 1e3 * statistics.median(times)
