"""PT2E static int8: ResNet18 and AlexNet (functional ops, shared modules) quantise as graphs.

Nets are random (seeded, batch-norm statistics not the identity), so the checks are exact
reruns: top-1 agreement with fp32 on a batch is a property of the quantisation error against
the margins between logits, which a seeded net fixes.
"""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from hpml.analysis.model_stats import state_dict_bytes
from hpml.optimize.quant.auto import AutoStatic
from hpml.optimize.quant.methods import static_int8
from hpml.optimize.quant.pt2e import Int8Graph, PT2EStatic

QUANTIZE_OPS = ("quantize_per_tensor", "dequantize_per_channel")


def images(n: int, size: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def trained_like(net: nn.Module) -> nn.Module:
    """``net`` in eval mode with batch-norm statistics that are not the identity."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_var.uniform_(0.5, 2.0)
                m.running_mean.uniform_(-0.1, 0.1)
    return net.eval()


@pytest.fixture(scope="module", params=[("resnet18", 32), ("alexnet", 64)], ids=lambda p: p[0])
def converted(request):
    name, size = request.param
    torch.manual_seed(0)
    net = trained_like(getattr(torchvision.models, name)(num_classes=10))
    x = images(64, size, 99)
    with torch.inference_mode():
        want = net(x)
    fp32 = state_dict_bytes(net)
    graph = PT2EStatic(compile=False).convert(net, [images(16, size, s) for s in range(3)])
    return graph, x, want, fp32


def test_the_converted_graph_is_quantised(converted):
    graph, *_ = converted
    targets = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    assert all(any(op in t for t in targets) for op in QUANTIZE_OPS), targets
    assert any(t.dtype == torch.int8 for t in graph.state_dict().values())


def test_int8_state_is_at_most_0_27_of_fp32(converted):
    graph, _, _, fp32 = converted
    assert state_dict_bytes(graph) <= 0.27 * fp32
    assert not any(t.dtype == torch.float32 and t.dim() == 4 for t in graph.state_dict().values())


def test_outputs_agree_with_fp32(converted):
    graph, x, want, _ = converted
    with torch.inference_mode():
        got = graph(x)
    assert (got - want).abs().max() <= 0.1 * want.abs().max()
    assert (got.argmax(1) == want.argmax(1)).float().mean() >= 0.9


class Residual(nn.Module):
    """The smallest net eager int8 cannot run: a functional add between int8 tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = torch.relu(self.body(y) + y)
        return self.head(y.mean((2, 3)))


def test_auto_takes_eager_where_it_runs_and_pt2e_where_it_does_not():
    auto = static_int8()
    assert isinstance(auto, AutoStatic)
    example = images(2, 16, 0)
    assert auto.for_net(Residual().eval(), example).backend == "pt2e"
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 2))
    assert auto.for_net(plain.eval(), example).backend == "torch_ao"


def test_compiled_int8_matches_the_converted_graph_at_any_batch_size():
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    net = trained_like(Residual())
    quantizer = static_int8(backend="pt2e")
    calibration = [images(8, 16, s) for s in range(2)]
    compiled = quantizer.quantize(net, calibration)
    assert isinstance(compiled, Int8Graph) and quantizer.compile_time_s > 0
    reference = PT2EStatic(compile=False).convert(net, calibration)
    for batch in (1, 5):
        x = images(batch, 16, 7)
        with torch.no_grad():
            want, got = reference(x), compiled(x)
        assert got.shape == (batch, 4)
        assert (got - want).abs().max() <= 0.1 * want.abs().max()
    graphs = counters["stats"]["unique_graphs"]
    with torch.inference_mode():  # a test stage's inference tensor: the same compiled graph
        x = images(5, 16, 7)
        assert x.is_inference() and torch.equal(compiled(x), got)
    assert counters["stats"]["unique_graphs"] == graphs
    assert {k.removeprefix("graph.") for k in compiled.state_dict()} == set(
        compiled.graph.state_dict()
    )  # one copy of the int8 state, not a second one under the compiled module
    x = images(2, 16, 7)
    with torch.no_grad():
        before = compiled(x)
        compiled.train()  # Lightning does this around stages; an exported graph would refuse
        assert torch.equal(compiled(x), before)
