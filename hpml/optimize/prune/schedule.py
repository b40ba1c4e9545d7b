"""The amount at each step of a schedule, and the reductions pruning gave: plain arithmetic.

- ``before_fit``: no epoch steps; the whole amount once, when fit starts;
- ``after_fit``: the whole amount at epoch ``epochs`` (after training, before fine-tuning);
- ``gradual``: ``amount * (epoch + 1) / epochs`` of the original at the start of each epoch.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpml.names import AFTER, BEFORE, BYTES, FLOPS_PER_SAMPLE, X, metric, side

SCHEDULES = ("before_fit", "after_fit", "gradual")


def steps(schedule: str, amount: float, epochs: int) -> dict[int, float]:
    """``{epoch: amount}`` to prune at the start of each epoch (empty for ``before_fit``)."""
    if schedule == "after_fit":
        return {epochs: amount}
    if schedule == "gradual":
        return {e: amount * (e + 1) / epochs for e in range(epochs)}
    return {}


def reductions(figures: Mapping[str, float]) -> dict[str, float]:
    """``prune/flops_reduction_x`` and ``prune/size_reduction_x``: before over after, each left
    out where a side is missing or zero."""
    ratios = {}
    for quantity, key, unit in (
        ("fwd", "flops_reduction", FLOPS_PER_SAMPLE),
        ("size", "size_reduction", BYTES),
    ):
        before = figures.get(metric(side("prune", BEFORE), quantity, unit))
        after = figures.get(metric(side("prune", AFTER), quantity, unit))
        if before and after:
            ratios[metric("prune", key, X)] = before / after
    return ratios
