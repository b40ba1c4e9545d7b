"""Numbers measured on every DDP rank, made global: one collective per call, on every rank.

A callback measures its own rank's share (samples it timed, its seconds, its device's peak). The
run reports the job: samples are summed over ranks, times and peaks taken from the rank that
needed the most. Every rank must call these at the same hook, as Lightning runs hooks on all.
"""

from __future__ import annotations

import lightning as L
import torch


def across_ranks(trainer: L.Trainer, values: dict[str, float], op: str) -> dict[str, float]:
    """``values`` reduced over the ranks by ``op`` (``sum`` or ``max``); as they are in a
    single process."""
    if trainer.world_size == 1 or not values:
        return values
    tensor = torch.tensor(list(values.values()), dtype=torch.float64)
    reduced = trainer.strategy.reduce(tensor.to(trainer.strategy.root_device), reduce_op=op)
    return dict(zip(values, reduced.tolist(), strict=True))
