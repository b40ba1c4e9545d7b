"""FLOP counts against independent hand counts, in the 2 x multiply-accumulate convention."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from hpml.analysis.flops import count_flops
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vae import VAE
from hpml.models.nets.vgg import vgg


def analytic_macs(model: nn.Module, example: torch.Tensor) -> int:
    """Multiply-accumulates of every Conv2d and Linear, from the shapes forward hooks see."""
    macs = 0

    def conv(module: nn.Conv2d, inputs, output) -> None:
        nonlocal macs
        kh, kw = module.kernel_size
        macs += output.numel() * (module.in_channels // module.groups) * kh * kw

    def linear(module: nn.Linear, inputs, output) -> None:
        nonlocal macs
        macs += output.numel() * module.in_features

    hooks = [
        m.register_forward_hook(conv if isinstance(m, nn.Conv2d) else linear)
        for m in model.modules()
        if isinstance(m, nn.Conv2d | nn.Linear)
    ]
    with torch.no_grad():
        model.eval()(example)
    for hook in hooks:
        hook.remove()
    return macs


@pytest.mark.parametrize(
    "build",
    [
        lambda: vgg(11, 1000, layout="imagenet"),
        lambda: vgg(13, 1000, layout="imagenet"),
        lambda: vgg(19, 1000, layout="imagenet"),
        lambda: torchvision.models.resnet18(),
        lambda: torchvision.models.alexnet(),
    ],
    ids=["vgg11", "vgg13", "vgg19", "resnet18", "alexnet"],
)
def test_imagenet_models_count_twice_the_analytic_macs(build):
    model = build()
    example = torch.randn(2, 3, 224, 224)
    assert count_flops(model, example).total == 2 * analytic_macs(model, example)


def test_vgg11_at_224_per_image():
    assert (
        count_flops(vgg(11, 1000, layout="imagenet"), torch.randn(1, 3, 224, 224)).total
        == 15_218_180_096
    )


def test_lstm_on_cpu_counts_its_gate_products():
    lstm = nn.LSTM(400, 256, num_layers=2, batch_first=True)
    count = count_flops(lstm, torch.randn(1, 200, 400))
    # per step: layer 1 4H x (I + H) = 1024 x 656, layer 2 1024 x 512; 200 steps; 2 FLOPs per MAC
    assert count.total == 2 * 200 * (1024 * 656 + 1024 * 512) == 478_412_800
    assert count.by_op == {"aten.mkldnn_rnn_layer": 478_412_800}


def test_lstm_classifier_adds_its_head_and_scales_with_batch():
    net = LSTMClassifier(1000, num_classes=2, embedding_dim=400, hidden_size=256, num_layers=2)
    count = count_flops(net, torch.randint(1, 1000, (3, 200)))
    assert count.total == 3 * (478_412_800 + 2 * 256 * 2)
    assert count.per_sample == 478_412_800 + 1024
    assert count.by_module["lstm"] == 3 * 478_412_800 and count.by_module["fc"] == 3 * 1024


def test_backward_of_lstm_is_twice_its_forward():
    lstm = nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(4, 5, 8)
    assert count_flops(lstm, x, with_backward=True).total == 3 * count_flops(lstm, x).total


def test_cpu_attention_counts_both_products():
    class Attention(nn.Module):
        def forward(self, q, k, v):
            return nn.functional.scaled_dot_product_attention(q, k, v)

    b, h, s, d = 2, 4, 16, 8
    q = k = v = torch.randn(b, h, s, d)
    assert count_flops(Attention(), (q, k, v)).total == 4 * b * h * s * s * d


def test_vae_of_study_3():
    count = count_flops(VAE(), torch.rand(1, 784))
    assert count.total == 2 * 651_200  # study 3: sum of in x out over Linear layers


def test_counting_leaves_the_model_untouched():
    model = vgg(11)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    count_flops(model, torch.randn(4, 3, 32, 32), with_backward=True)
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_backward_of_a_qat_prepared_model_counts_as_its_float_model():
    """QAT layers hand their weight (a leaf) to ``weight_fake_quant``: FlopCounterMode's module
    hooks then broke ``autograd.grad`` with "A leaf node was passed to _will_engine_execute_node"
    (vgg_quant's qat job, when the perf monitor recounted after the swap)."""
    from hpml.optimize.quant.methods import qat

    example = torch.randn(1, 3, 32, 32)
    float_count = count_flops(vgg(11), example, with_backward=True).total
    qat = qat().prepare_qat(vgg(11), example).train()
    observers = {k: v.clone() for k, v in qat.state_dict().items()}
    assert count_flops(qat, example, with_backward=True).total == float_count
    # observers update even in eval mode: counting must not move the quantisation ranges
    assert qat.training and observers.keys() == qat.state_dict().keys()
    assert all(torch.equal(observers[k], v) for k, v in qat.state_dict().items())
    assert all(p.grad is None for p in qat.parameters())


def test_backward_through_a_parameter_given_to_a_submodule():
    """The bug without QAT: any module handed a parameter itself, with an input needing grad."""

    class Scale(nn.Module):
        def forward(self, weight: torch.Tensor) -> torch.Tensor:
            return 2 * weight

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 8))
            self.scale = Scale()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.scale(self.weight).t()

    x = torch.randn(3, 8, requires_grad=True)
    count = count_flops(Net(), x, with_backward=True)
    assert count.total == 2 * (2 * 3 * 8 * 4)  # forward product + the weight's gradient product
    assert x.grad is None


def test_backward_over_int8_ops_is_counted_without_warnings():
    """A dynamically quantised VGG keeps float convs: the int8 Linears have no backward."""
    import warnings

    from hpml.optimize.quant.methods import dynamic_int8

    example = torch.randn(1, 3, 32, 32)
    quantised = dynamic_int8().quantize(vgg(11), [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        count = count_flops(quantised, example, with_backward=True)
    assert 0 < count.total < count_flops(vgg(11), example, with_backward=True).total


def _attention() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, q, k, v):
            return nn.functional.scaled_dot_product_attention(self.proj(q), k, v)

    q = torch.randn(2, 4, 16, 8)
    return Attention(), (q, q.clone(), q.clone())


@pytest.mark.parametrize(
    "build",
    [
        lambda: (vgg(11), torch.randn(2, 3, 32, 32)),
        lambda: (nn.LSTM(8, 16, num_layers=2, batch_first=True), torch.randn(3, 5, 8)),
        lambda: (VAE(), torch.rand(2, 784)),
        _attention,
    ],
    ids=["vgg11", "lstm", "vae", "attention"],
)
def test_forward_half_of_a_backward_count_is_the_forward_count(build):
    """Perf and roofline read the forward FLOPs off the with-backward pass: the same numbers,
    module by module and op by op, as a forward-only count."""
    model, example = build()
    alone = count_flops(model, example)
    both = count_flops(model, example, with_backward=True)
    assert alone.forward is None and both.forward == alone
    assert alone.total > 0 and both.total > alone.total


class Seen(nn.Module):
    """A Linear that notes the device of each input it is given, and reads its input's values
    where ``reads`` (as a forward that branches on them does)."""

    def __init__(self, reads: bool = False) -> None:
        super().__init__()
        self.fc, self.reads, self.devices = nn.Linear(8, 4), reads, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.devices.append(x.device.type)
        return self.fc(x * 2) if self.reads and x.sum().item() > 0 else self.fc(x)


def test_a_net_is_counted_on_meta_tensors_and_one_that_reads_values_on_its_own():
    x = torch.ones(3, 8)
    shapes_only, reads = Seen(), Seen(reads=True)
    weight = shapes_only.fc.weight.detach().clone()
    # forward 2 x 3 x 8 x 4, and the weight's gradient as much (the input needs none)
    assert count_flops(shapes_only, x, with_backward=True).total == 2 * (2 * 3 * 8 * 4)
    assert shapes_only.devices == ["meta"] and shapes_only.fc.weight.grad is None
    assert torch.equal(shapes_only.fc.weight, weight)  # the net's own tensors untouched
    assert count_flops(reads, x).total == 2 * 3 * 8 * 4
    assert reads.devices == ["meta", "cpu"]  # .item() of a meta tensor fails: counted on its own
