"""Save and reload pruned models with their (smaller) architecture.

A physically pruned model no longer fits its class's constructor arguments, so a plain
``state_dict`` does not load into a freshly built one. ``save`` pickles the whole module (its
layers with their new sizes and its weights) with ``torch.save``; ``load`` gives it back. The
model's class must be importable when loading, as for any pickled module. torch-pruning's
``tp.state_dict`` does the same through module ``__dict__``s, but it cannot pickle an
``nn.LSTM`` (weak references) nor restore one (``all_weights`` has no setter). Masks are folded
into the weights first, so the file holds what a user ships; the model itself is left as it was.
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
