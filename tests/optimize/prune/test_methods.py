"""The methods: one class per ``prune`` option, each complete; a plug-in needs only its scores."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpml.errors import ConfigError
from hpml.optimize.prune import Pruner, Structured, apply_prune
from hpml.optimize.prune.methods import FPGM, GlobalL1Unstructured
from tests.optimize.prune.conf_methods import methods, option_nodes

METHODS = methods()


def test_every_option_is_named_as_the_class_its_method_node_builds():
    nodes = option_nodes()
    assert nodes, "no prune option builds a method"
    for option in nodes:
        assert METHODS[option].name == option
    assert GlobalL1Unstructured().name == "global_l1_unstructured" and FPGM().name == "fpgm"


@pytest.mark.parametrize("name", list(METHODS))
def test_a_method_masks_its_share_of_one_weight_alone(name):
    torch.manual_seed(0)
    weight = torch.randn(8, 5)
    method = METHODS[name]
    mask = method.mask_alone(weight, 0.5)
    assert mask.shape == weight.shape
    if method.structured:
        assert int((mask.sum(1) == 0).sum()) == 4 and set(mask.sum(1).tolist()) == {0.0, 5.0}
        assert method.channels() is not None
        assert method.scores(weight).shape == (8,)
        assert method.default_mode == "physical" and method.check_mode(None) == "physical"
    else:
        assert int((mask == 0).sum()) == 20
        assert method.default_mode == "mask"
        with pytest.raises(ConfigError, match="mode='physical'"):
            method.check_mode("physical")


class Largest(Structured):
    """A plug-in that defines only its scores: rows with the smallest largest |weight| go."""

    def scores(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().amax(1)


@pytest.mark.parametrize("mode", ["mask", "physical"])
def test_a_structured_plug_in_with_only_scores_prunes_in_both_modes(mode):
    model = nn.Sequential(nn.Linear(3, 4, bias=False), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():  # row maxima 1, 5, 2, 9: the first goes at 0.25
        model[0].weight.copy_(torch.tensor([[1.0, 1, 1], [5, 0, 0], [0, 2, 0], [0, 0, 9]]))
    pruner = Pruner(Largest(), mode, exclude=["output_layer"])
    pruner.attach(model, torch.ones(2, 3))
    report = pruner.prune(model, 0.25)
    assert report.row_sparsity == 0.25
    pruner.finalize(model)
    alive = [r.tolist() for r in model[0].weight if r.abs().sum() > 0]
    assert alive == [[5.0, 0, 0], [0, 2.0, 0], [0, 0, 9.0]]
    assert model(torch.ones(2, 3)).shape == (2, 2)


def test_apply_prune_from_plain_pytorch_removes_channels_and_says_how_many():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    applied = apply_prune(model, FPGM(), 0.5, torch.ones(2, 3), mode="physical")
    pruned, report = applied.module, applied.report
    assert pruned is model and model[0].out_features == 4 and model[2].in_features == 4
    assert report.row_sparsity == 0.5 and report.widths == {"0": (8, 4)}
    assert pruned(torch.ones(5, 3)).shape == (5, 2)
