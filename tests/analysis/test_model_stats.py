"""Model statistics against independent counts: hand arithmetic and the saved file's size."""

from __future__ import annotations

import torch
from torch import nn

from hpml.analysis.model_stats import nonzero_param_count, param_count, state_dict_bytes


def test_param_counts_match_hand_count_and_skip_frozen_ones():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert param_count(model) == (3 * 4 + 4) + (4 * 2 + 2)
    model[0].weight.requires_grad_(False)
    assert param_count(model, trainable_only=True) == 4 + 4 * 2 + 2


def test_nonzero_count_sees_pruned_weights():
    model = nn.Linear(10, 10)
    with torch.no_grad():
        model.weight.view(-1)[:37] = 0.0
        model.bias.fill_(1.0)
    assert nonzero_param_count(model) == 110 - 37


def test_size_is_the_bytes_of_the_saved_state_dict(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.LazyLinear(5))
    model(torch.zeros(1, 3, 8, 8))
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    assert state_dict_bytes(model) == path.stat().st_size
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert weights < state_dict_bytes(model) < weights + 8192  # payload plus zip container
