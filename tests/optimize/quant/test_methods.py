"""hpml's quantisers as the ``quant`` options of ``conf/`` build them: each knows its method and
backends, and refuses the knobs it cannot take in one line."""

from __future__ import annotations

import inspect

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from hpml.callbacks.quant import Quantize
from hpml.errors import ConfigError
from hpml.optimize.quant import Quantizer
from hpml.optimize.quant.methods import qat, static_int8, weight_only_int8
from tests.conftest import CONF, options

# the callback's own keys: the option's other keys are its quantiser's knobs
OWN = set(inspect.signature(Quantize).parameters) | {"_target_", "defaults"}


def option_nodes() -> dict[str, dict]:
    """``{option: its own config}`` of every ``quant`` option that quantises."""
    nodes = {name: OmegaConf.load(CONF / "quant" / f"{name}.yaml") for name in options("quant")}
    return {name: node for name, node in nodes.items() if "quantizer" in node}


@pytest.mark.parametrize("option", list(option_nodes()))
def test_every_option_builds_a_quantizer_of_its_method(option):
    node = option_nodes()[option]
    knobs = {k: v for k, v in OmegaConf.to_container(node).items() if k not in OWN}
    if knobs.get("backend") == "torchao":
        pytest.importorskip("torchao")
    quantizer = instantiate(node.quantizer)(**knobs)
    assert isinstance(quantizer, Quantizer)
    # the method's name is written once: the option's `method` knob where it has one, else
    # its quantiser's (the `_target_`'s name)
    assert quantizer.method == node.get("method", node.quantizer._target_.rsplit(".", 1)[-1])


def test_a_method_refuses_a_backend_it_has_not_naming_those_it_has():
    with pytest.raises(ConfigError) as info:
        static_int8(backend="torchao")
    assert str(info.value) == (
        "backend='torchao' is invalid: expected auto or a backend that has static_int8: "
        "torch_ao, pt2e"
    )
    with pytest.raises(ConfigError, match=r"backend='pt2e'.*that has qat: torch_ao$"):
        qat(backend="pt2e")


def test_another_method_on_an_option_and_a_flag_not_true_or_false_are_refused():
    with pytest.raises(ConfigError, match="method='qat' is invalid: expected weight_only_int8 or"):
        weight_only_int8(method="qat")
    with pytest.raises(ConfigError, match="per_channel='maybe' is invalid: expected true or"):
        static_int8(per_channel="maybe")


def test_the_callback_refuses_a_knob_its_quantizer_does_not_take(composed):
    from hpml.build import build

    cfg = composed(["quant=dynamic_int8", "+quant.per_channel=false"])
    with pytest.raises(ConfigError) as info:
        build("quant", cfg.quant)
    assert str(info.value).startswith(
        "quant.per_channel=False is invalid: expected an argument of dynamic_int8 (it takes "
    )
