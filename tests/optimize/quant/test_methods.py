"""hpml's quantisers as the ``quant`` options of ``conf/`` build them: each knows its method and
backends, and refuses the knobs it cannot take in one line."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from hpml.errors import ConfigError
from hpml.optimize.quant import Quantizer
from hpml.optimize.quant.methods import qat, static_int8, weight_only_int8
from tests.conftest import CONF, options


def option_nodes() -> dict[str, dict]:
    """``{option: its own config}`` of every ``quant`` option that quantises."""
    nodes = {name: OmegaConf.load(CONF / "quant" / f"{name}.yaml") for name in options("quant")}
    return {name: node for name, node in nodes.items() if "method" in node}


@pytest.mark.parametrize("option", list(option_nodes()))
def test_every_option_builds_a_quantizer_of_its_method(option):
    method = option_nodes()[option].method
    if method.get("backend") == "torchao":
        pytest.importorskip("torchao")
    quantizer = instantiate(method)
    assert isinstance(quantizer, Quantizer)
    # the method's name is written once: its function's
    assert quantizer.name == method._target_.rsplit(".", 1)[-1]


def test_a_method_refuses_a_backend_it_has_not_naming_those_it_has():
    with pytest.raises(ConfigError) as info:
        static_int8(backend="torchao")
    assert str(info.value) == (
        "backend='torchao' is invalid: expected auto or a backend that has static_int8: "
        "torch_ao, pt2e"
    )
    with pytest.raises(ConfigError, match=r"backend='pt2e'.*that has qat: torch_ao$"):
        qat(backend="pt2e")


def test_a_flag_not_true_or_false_is_refused():
    with pytest.raises(ConfigError, match="activations='yes' is invalid: expected true or"):
        weight_only_int8(activations="yes")
    with pytest.raises(ConfigError, match="per_channel='maybe' is invalid: expected true or"):
        static_int8(per_channel="maybe")


def test_a_knob_its_quantizer_does_not_take_is_refused_naming_the_method(composed):
    from hpml.validate import check_config

    cfg = composed(["quant=dynamic_int8", "+quant.method.per_channel=false"])
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert str(info.value).startswith(
        "quant.method.per_channel=False is invalid: expected an argument of "
        "hpml.optimize.quant.methods.dynamic_int8 (it takes backend, embeddings, engine)"
    )
