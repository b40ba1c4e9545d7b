"""Size of a model three ways: parameters, non-zero parameters, bytes of its saved state dict."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch import nn


def param_count(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter elements (shared parameters counted once, as ``parameters()`` does)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def nonzero_param_count(model: nn.Module) -> int:
    """Parameter elements that are not exactly zero: what masks and pruning leave behind."""
    return sum(int(torch.count_nonzero(p.detach())) for p in model.parameters())


def state_dict_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict(), "model.pt")``: the file a user would ship.

    Saved under ``torch.serialization.skip_data`` (the same size, without writing the storages);
    quantised models, which it refuses, are saved in full.
    """
    state = model.state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pt"
        try:
            with torch.serialization.skip_data():
                torch.save(state, path)
        except RuntimeError:  # "Cannot serialize qtensor under skip_data"
            torch.save(state, path)
        return path.stat().st_size
