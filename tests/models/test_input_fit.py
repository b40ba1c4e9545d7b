"""The meta probe of a net's input size (:func:`hpml.models.input_fit.probe`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpml.models.input_fit import probe


@pytest.mark.parametrize("training", [True, False])
def test_a_probe_runs_batch_norm_on_one_image_and_leaves_the_mode(training: bool) -> None:
    """Batch norm in training mode refuses a batch of one 1x1 image: the probe runs the net in
    eval mode, and hands the net back in the mode it was given (validation probes the planned
    model itself)."""
    with torch.device("meta"):
        net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))
    net.train(training)
    assert probe(net, 3, 3).runs
    assert not probe(net, 3, 4).runs  # 2x2 features: not the Linear's 4 inputs
    assert [m.training for m in net.modules()] == [training] * 5
