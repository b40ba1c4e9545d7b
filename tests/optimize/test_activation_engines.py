"""Activation memory in plain PyTorch: stages found, names checked, bytes measured, grads kept."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torchvision
from torch import nn

from hpml.analysis.memory import SavedActivations, tensor_bytes
from hpml.analysis.scaling import ScalingModel
from hpml.errors import ConfigError
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vgg import vgg
from hpml.optimize.activations import Bf16SavedTensors, checkpointed, default_stages, resolve


def tiny_cnn() -> nn.Module:
    torch.manual_seed(0)
    block = [nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True)]
    block2 = [nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True)]
    net = nn.Sequential()
    net.add_module("features", nn.Sequential(*block, nn.MaxPool2d(2), *block2, nn.MaxPool2d(2)))
    net.add_module("flatten", nn.Flatten())
    net.add_module("classifier", nn.Linear(16 * 4 * 4, 4))
    return net


def batch(size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(size, 3, 16, 16, generator=generator), torch.arange(size) % 4


def context(method: str, net: nn.Module) -> contextlib.AbstractContextManager:
    if method == "checkpoint":
        return checkpointed(net, default_stages(net))
    if method == "bf16":
        return Bf16SavedTensors(net)
    return contextlib.nullcontext()


def step(method: str, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[int, float]:
    """One forward and backward under ``method``: the saved bytes autograd really kept, the loss."""
    net.zero_grad()
    with SavedActivations(net) as saved, context(method, net):
        loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    return saved.bytes, loss.item()


def test_default_stages_are_the_blocks_between_poolings() -> None:
    assert [str(s) for s in default_stages(vgg(11))] == [
        "features[0:4]",
        "features[4:8]",
        "features[8:15]",
        "features[15:22]",
        "features[22:29]",
    ]
    assert [str(s) for s in default_stages(torchvision.models.resnet18())] == [
        f"layer{i}" for i in range(1, 5)
    ]
    wrapped = nn.Module()
    wrapped.net = LSTMClassifier(100, embedding_dim=8, hidden_size=8)
    wrapped.loss = nn.CrossEntropyLoss()  # a LightningModule's parameterless helpers
    assert [str(s) for s in default_stages(wrapped)] == ["net.embedding", "net.lstm", "net.fc"]


def test_unknown_names_and_bad_slices_are_refused_naming_what_is_valid() -> None:
    net = tiny_cnn()
    assert [str(s) for s in resolve(net, ["features[0:4]", "classifier"])] == [
        "features[0:4]",
        "classifier",
    ]
    with pytest.raises(ConfigError, match=r"modules='feature' is invalid: .*features\[0:4\]"):
        resolve(net, ["feature"])
    with pytest.raises(ConfigError, match=r"modules='features\[2:99\]' is invalid: .*<= 8"):
        resolve(net, ["features[2:99]"])
    with pytest.raises(ConfigError, match=r"modules='classifier\[0:1\]'"):
        resolve(net, ["classifier[0:1]"])


@pytest.mark.parametrize("method", ["checkpoint", "bf16"])
def test_saved_bytes_shrink_and_gradients_match_keep(method: str) -> None:
    x, y = batch()
    keep_net, net = tiny_cnn(), tiny_cnn()
    keep_bytes, keep_loss = step("keep", keep_net, x, y)
    saved_bytes, loss = step(method, net, x, y)
    assert 0 < saved_bytes < keep_bytes
    keep_grads = torch.cat([p.grad.flatten() for p in keep_net.parameters()])
    grads = torch.cat([p.grad.flatten() for p in net.parameters()])
    if method == "checkpoint":
        assert loss == keep_loss
        torch.testing.assert_close(grads, keep_grads, rtol=1e-5, atol=1e-6)
        for a, b in zip(keep_net.state_dict().values(), net.state_dict().values(), strict=True):
            assert torch.equal(a, b)  # the recomputation left BatchNorm's statistics alone
    else:
        assert saved_bytes <= 0.6 * keep_bytes  # float32 -> bfloat16, pooling indices aside
        assert (grads - keep_grads).norm() <= 2e-2 * keep_grads.norm()  # bf16: 8-bit mantissa
    assert "forward" not in net.features.__dict__  # patches put back


def test_bf16_runs_with_no_enclosing_hooks() -> None:
    x, y = batch()
    net = tiny_cnn()
    with Bf16SavedTensors(net):
        loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    assert all(p.grad is not None for p in net.parameters())


@pytest.mark.parametrize("method", ["keep", "checkpoint", "bf16"])
def test_training_still_converges(method: str) -> None:
    x, y = batch(16)
    net = tiny_cnn()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(15):
        losses.append(step(method, net, x, y)[1])
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]


def test_a_checkpointed_fit_predicts_a_larger_batch_that_fits() -> None:
    """hpml.report.predict fits the measured training total against the batch size; with the
    stages recomputed the per-sample slope falls, so a larger batch fits the same memory."""
    largest = {}
    for method in ("keep", "checkpoint"):
        net, sizes, totals = tiny_cnn(), [4, 16], []
        for size in sizes:
            saved, _ = step(method, net, *batch(size))
            params = list(net.parameters())
            totals.append(tensor_bytes(params) * 2 + saved)  # weights, gradients, activations
        model = ScalingModel.fit(sizes, [1.0, 2.0], totals)
        largest[method] = model.largest_batch(capacity_bytes=64 * 2**20)
    assert largest["checkpoint"] > largest["keep"]


def test_a_checkpointed_lstm_keeps_less_and_the_same_gradients() -> None:
    torch.manual_seed(0)
    keep = LSTMClassifier(50, embedding_dim=16, hidden_size=16)
    net = copy.deepcopy(keep)
    tokens, labels = torch.randint(1, 50, (4, 12)), torch.tensor([0, 1, 0, 1])
    keep_bytes, keep_loss = step("keep", keep, tokens, labels)
    saved_bytes, loss = step("checkpoint", net, tokens, labels)
    assert saved_bytes < keep_bytes
    assert loss == keep_loss
    for a, b in zip(keep.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad)


def test_eval_and_no_grad_run_the_stages_plainly() -> None:
    net = tiny_cnn().eval()
    x, _ = batch()
    expected = net(x)
    with torch.no_grad(), checkpointed(net, default_stages(net)):
        assert torch.equal(net(x), expected)
    assert "forward" not in net.features.__dict__
    copy.deepcopy(net)(x)  # a copy made afterwards carries no patch
