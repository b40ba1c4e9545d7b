"""Metric names, built in one place as ``<stage>/<quantity>_<unit>``: every number says its unit."""

from __future__ import annotations

SAMPLES_PER_S = "samples_per_s"
MS = "ms"
S = "s"
BYTES = "bytes"
PCT = "pct"
COUNT = "count"
FLOPS = "flops"  # 2 x multiply-accumulate, see hpml.analysis.flops
FLOPS_PER_SAMPLE = "flops_per_sample"
FLOPS_PER_S = "flops_per_s"
FLOP_PER_BYTE = "flop_per_byte"  # arithmetic intensity
BYTES_PER_S = "bytes_per_s"
NATS = "nats"  # cross-entropy and KL divergence, natural log
X = "x"  # a ratio of two like quantities: before / after


def metric(stage: str, quantity: str, unit: str) -> str:
    """``metric("train", "throughput", SAMPLES_PER_S)`` -> ``"train/throughput_samples_per_s"``."""
    return f"{stage}/{quantity}_{unit}"
