"""Save and reload pruned models with their (smaller) architecture.

A physically pruned model no longer fits its class's constructor, so ``save`` pickles the whole
module; its class must be importable to ``load``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from hpml.optimize.prune.mask import folded_copy


def save(model: nn.Module, path: str | Path) -> Path:
    """Write ``model`` (masks folded into a copy) with its architecture to ``path``."""
    path = Path(path)
    torch.save(folded_copy(model), path)
    return path


def load(path: str | Path, map_location: str | torch.device | None = None) -> nn.Module:
    """The module ``save`` wrote (a pickle: load only files you trust)."""
    return torch.load(path, map_location=map_location, weights_only=False)
