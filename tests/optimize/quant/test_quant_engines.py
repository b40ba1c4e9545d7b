"""Quantisation engines on plain nets: size, closeness to fp32, QAT, and one-line errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpml.analysis.model_stats import state_dict_bytes
from hpml.errors import ConfigError, IncompatibleError
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vgg import CifarVGG
from hpml.optimize.quant import OnDevice, apply_quant
from hpml.optimize.quant.methods import dynamic_int8, qat, static_int8, weight_only_int8
from hpml.optimize.quant.torch_ao import fusable_groups


def images(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def vgg_pair():
    torch.manual_seed(0)
    net = CifarVGG(11).eval()
    with torch.no_grad():  # a BN state that is not the identity, as after training
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_var.uniform_(0.5, 2.0)
                m.running_mean.uniform_(-0.1, 0.1)
    fp32 = state_dict_bytes(net)
    reference = CifarVGG(11).eval()
    reference.load_state_dict(net.state_dict())
    applied = apply_quant(net, static_int8(), [images(16, s) for s in range(3)])
    quantised = applied.module
    assert applied.report is None  # eager int8 runs VGG: nothing compiled
    return reference, quantised, fp32


def test_static_int8_vgg11_is_a_quarter_of_fp32(vgg_pair):
    _, quantised, fp32 = vgg_pair
    assert abs(state_dict_bytes(quantised) / fp32 - 0.25) <= 0.05 * 0.25


def test_static_int8_outputs_stay_close_to_fp32(vgg_pair):
    reference, quantised, _ = vgg_pair
    x = images(64, 99)
    with torch.inference_mode():
        want, got = reference(x), quantised(x)
    assert (got - want).abs().max() <= 0.1 * want.abs().max()
    assert (got.argmax(1) == want.argmax(1)).float().mean() >= 0.8


def test_static_int8_fuses_conv_bn_relu(vgg_pair):
    _, quantised, _ = vgg_pair
    kinds = {type(m).__name__ for m in quantised.modules()}
    assert "ConvReLU2d" in kinds and "BatchNorm2d" not in kinds
    assert len(fusable_groups(CifarVGG(11))) == 8


def test_dynamic_int8_lstm_with_embedding_is_a_quarter_of_fp32():
    torch.manual_seed(0)  # study 1's widths (per-row embedding scales cost 8 bytes a row)
    net = LSTMClassifier(20000, 2, embedding_dim=400, hidden_size=256).eval()
    tokens = torch.randint(1, 20000, (64, 50), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = net(tokens)
    fp32 = state_dict_bytes(net)
    quantised = dynamic_int8().quantize(net)
    assert abs(state_dict_bytes(quantised) / fp32 - 0.25) <= 0.05 * 0.25
    with torch.inference_mode():
        got = quantised(tokens)
    assert (got - want).abs().max() <= 0.1 * want.abs().max() + 1e-3
    assert (got.argmax(1) == want.argmax(1)).float().mean() >= 0.9


def test_qat_trains_and_converts():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    x, y = images(64, 1), torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(2))
    x = x + y.view(-1, 1, 1, 1).float()  # a learnable signal
    quantizer = qat()
    model = quantizer.prepare_qat(net)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(40):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    converted = quantizer.convert(model)
    assert any(
        "Quantized" in type(m).__name__
        or type(m).__module__.startswith("torch.ao.nn.intrinsic.quantized")
        for m in converted.modules()
    )
    with torch.inference_mode():
        assert converted(x).shape == (64, 4)


def test_method_without_supported_layer_is_one_line():
    convs = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.raises(IncompatibleError) as info:
        dynamic_int8().check(convs)
    message = str(info.value)
    assert "\n" not in message
    assert "Sequential has none" in message and "Linear" in message


def test_static_int8_on_token_ids_is_one_line():
    net = LSTMClassifier(100)
    with pytest.raises(IncompatibleError, match="use quant=dynamic_int8"):
        static_int8().check_inputs(net, torch.zeros(1, 8, dtype=torch.long))


def test_static_int8_with_no_calibration_batches_is_a_config_error():
    with pytest.raises(ConfigError, match="calibration_batches=0 is invalid"):
        static_int8().quantize(CifarVGG(11), [])


def test_a_backend_mismatch_is_a_config_error():
    with pytest.raises(ConfigError, match="a backend that has static_int8: torch_ao"):
        static_int8(backend="torchao")


def test_on_device_keeps_its_module_where_it_is():
    wrapped = nn.Sequential(OnDevice(nn.Linear(4, 2), "cpu"))
    wrapped.to(torch.float64)  # would convert the weights if it reached them
    assert wrapped[0].module.weight.dtype == torch.float32
    assert wrapped(torch.ones(3, 4, dtype=torch.float64)).dtype == torch.float32


def test_torchao_weight_only_int8_on_linear_layers():
    pytest.importorskip("torchao")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    x = torch.randn(32, 256)
    with torch.inference_mode():
        want = net(x)
    quantizer = weight_only_int8(backend="torchao")
    assert quantizer.cuda_capable
    quantised = quantizer.quantize(net)
    with torch.inference_mode():
        got = quantised(x)
    assert (got - want).abs().max() <= 0.05 * want.abs().max()
    with pytest.raises(IncompatibleError, match="Linear layers"):
        quantizer.check(nn.Sequential(nn.Conv2d(3, 4, 3)))


def test_torchao_missing_is_one_line(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *args):
        if name.startswith("torchao"):
            raise ModuleNotFoundError("No module named 'torchao'", name="torchao")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", fake)
    from hpml.optimize.quant.torchao_backend import BackendMissingError

    with pytest.raises(BackendMissingError) as info:
        weight_only_int8()
    assert "pip install 'torchao==0.18.*'" in str(info.value) and "\n" not in str(info.value)
