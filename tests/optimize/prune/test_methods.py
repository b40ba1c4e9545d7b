"""The method table: one entry and one config per method, each entry complete."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from hpml.errors import ConfigError
from hpml.optimize.prune import METHODS
from hpml.optimize.prune.methods import find
from tests.conftest import options


def test_every_method_has_one_config_and_every_config_one_method(composed):
    configured = {}
    for option in options("prune"):
        node = composed([f"prune={option}"]).get("prune")
        if node:
            configured[option] = OmegaConf.select(node, "method")
    assert configured == {name: name for name in METHODS}


@pytest.mark.parametrize("name", list(METHODS))
def test_a_method_masks_its_share_of_one_weight_alone(name):
    torch.manual_seed(0)
    weight = torch.randn(8, 5)
    method = METHODS[name]
    mask = method.mask_alone(weight, 0.5)
    assert mask.shape == weight.shape
    if method.structured:
        assert int((mask.sum(1) == 0).sum()) == 4 and set(mask.sum(1).tolist()) == {0.0, 5.0}
        assert method.channels is not None and method.units is not None
        assert method.units(weight).shape == (8,)
        assert method.default_mode == "physical"
    else:
        assert int((mask == 0).sum()) == 20
        assert method.default_mode == "mask"


def test_an_unknown_method_names_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        find("l3_structured")
    assert str(info.value).startswith("method='l3_structured' is invalid: expected one of l1_")
