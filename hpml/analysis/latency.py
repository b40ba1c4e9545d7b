"""Inference latency of one model on a fixed input, call by call: the bench's per-variant step
and a roofline's whole-model time (a run's before/after comparisons use
:mod:`hpml.analysis.compare` instead)."""

from __future__ import annotations

import statistics
from typing import Any

import torch
from torch import nn

from hpml.analysis.compare import evaluating, example_device, forward_call
from hpml.analysis.timing import call_seconds


def forward_seconds(model: nn.Module, example: Any, calls: int, warmup: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``model(example)`` (a tensor or a tuple of inputs)
    after ``warmup`` untimed ones, timed call by call in eval mode under
    ``torch.inference_mode``."""
    forward = forward_call(model, example)
    with evaluating([model]), torch.inference_mode():
        return call_seconds(forward, calls, example_device(model, example), warmup)


def measure_latency(model: nn.Module, example: Any, rounds: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of ``rounds`` calls of :func:`forward_seconds`."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be at least 1")
    return 1e3 * statistics.median(forward_seconds(model, example, rounds, warmup))
