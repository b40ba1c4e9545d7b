"""Model statistics against independent counts: hand arithmetic and the saved file's size."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import prune

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


def _conv_net() -> nn.Module:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.LazyLinear(5))
    model(torch.zeros(1, 3, 8, 8))
    return model


def _pruned() -> nn.Module:
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 4))
    prune.l1_unstructured(model[0], "weight", amount=0.5)  # weight_orig and weight_mask saved
    return model


def _dynamic_int8() -> nn.Module:
    lstm = nn.Sequential(nn.LSTM(16, 32, num_layers=2), nn.Identity())
    return torch.ao.quantization.quantize_dynamic(lstm, {nn.LSTM, nn.Linear}, dtype=torch.qint8)


def _resnet18() -> nn.Module:
    from torchvision.models import resnet18

    return resnet18()  # 45 MB of weights, many storages


@pytest.mark.parametrize(
    "build", [_conv_net, _pruned, _dynamic_int8, _resnet18], ids=lambda f: f.__name__.strip("_")
)
def test_size_is_the_bytes_of_the_saved_state_dict(tmp_path, build):
    """The count skips writing the weights' bytes: it must still equal a plain save's size."""
    model = build()
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    assert state_dict_bytes(model) == path.stat().st_size
    state = model.state_dict()
    weights = sum(
        t.numel() * t.element_size()
        for t in state.values()
        if isinstance(t, torch.Tensor) and not t.is_quantized
    )
    assert weights < state_dict_bytes(model) < weights + 64 * 1024 + 128 * len(state)
