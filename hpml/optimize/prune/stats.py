"""Per-weight sparsity against the original model: elements and rows removed or zero."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from hpml.optimize.prune.targets import Target


@dataclass(frozen=True)
class LayerStats:
    """One targeted weight: its shape and counts now, and its size in the original model.
    ``rows`` are dim-0 slices; ``rows_alive`` counts those with any non-zero element.
    """

    shape_before: tuple[int, ...]
    shape: tuple[int, ...]
    numel_before: int
    nonzero: int
    rows_before: int
    rows_alive: int

    @property
    def sparsity(self) -> float:
        return 1 - self.nonzero / self.numel_before if self.numel_before else 0.0

    @property
    def row_sparsity(self) -> float:
        return 1 - self.rows_alive / self.rows_before if self.rows_before else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sparsity": self.sparsity, "row_sparsity": self.row_sparsity}


def layer_stats(
    model: nn.Module, targets: Sequence[Target], before: dict[str, LayerStats] | None = None
) -> dict[str, LayerStats]:
    """Stats of each target; ``before`` (stats of the original) supplies the original sizes."""
    found = {}
    for target in targets:
        weight = target.tensor(model).detach()
        rows = weight.reshape(weight.shape[0], -1) if weight.dim() else weight.reshape(1, 1)
        shape = tuple(weight.shape)
        old = (before or {}).get(target.name)
        found[target.name] = LayerStats(
            shape if old is None else old.shape_before,
            shape,
            weight.numel() if old is None else old.numel_before,
            int(torch.count_nonzero(weight)),
            rows.shape[0] if old is None else old.rows_before,
            int((rows != 0).any(1).sum()),
        )
    return found
