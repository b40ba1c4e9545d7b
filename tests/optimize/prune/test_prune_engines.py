"""Pruning engines in plain PyTorch: sparsity, rankings on hand-built weights, shapes, reloads."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpml.analysis.flops import count_flops
from hpml.errors import ConfigError, IncompatibleError
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vae import VAE
from hpml.models.nets.vgg import vgg
from hpml.optimize.prune import Pruner
from hpml.optimize.prune import io as prune_io
from hpml.optimize.prune.amount import units_to_keep
from hpml.optimize.prune.lstm import LSTMPruner, _gate_rows
from hpml.optimize.prune.methods import (
    L1Structured,
    L1Unstructured,
    L2Structured,
    l1_scores,
    l2_scores,
)
from tests.optimize.prune.conf_methods import methods, names

# read from conf/prune/, so a new method is tested without editing this file
UNSTRUCTURED = names(structured=False)
STRUCTURED = names(structured=True)


class Small(nn.Module):
    """conv1 -> conv2 (output layer): conv1's filters are what gets ranked."""

    def __init__(self, filters: torch.Tensor) -> None:
        super().__init__()
        n = filters.shape[0]
        self.conv1 = nn.Conv2d(1, n, kernel_size=(1, filters.shape[1]), bias=False)
        self.conv2 = nn.Conv2d(n, 2, kernel_size=1, bias=False)
        with torch.no_grad():
            self.conv1.weight.copy_(filters.view(n, 1, 1, -1))
            self.conv2.weight.fill_(1.0)  # same for every input channel: ranking = conv1's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


def kept_filters(method: str, filters: torch.Tensor, amount: float, mode: str) -> set[int]:
    model = Small(filters.clone())
    pruner = Pruner(methods()[method], mode)
    pruner.attach(model, torch.ones(1, 1, 1, filters.shape[1]))
    pruner.prune(model, amount)
    weight = model.conv1.weight.detach().flatten(1)
    rows = [tuple(r.tolist()) for r in filters]
    return {rows.index(tuple(r.tolist())) for r in weight if r.abs().sum() > 0}


@pytest.mark.parametrize("mode", ["mask", "physical"])
def test_l1_and_l2_remove_the_smallest_norm_filters(mode):
    # filter 0: L1 3, L2 3; filter 1: L1 4, L2 2; filters 2, 3 large in both norms
    filters = torch.tensor([[3.0, 0, 0, 0], [1, 1, 1, 1], [4, 4, 0, 0], [0, 5, 5, 0]])
    assert kept_filters("l1_structured", filters, 0.25, mode) == {1, 2, 3}
    assert kept_filters("l2_structured", filters, 0.25, mode) == {0, 2, 3}


@pytest.mark.parametrize("mode", ["mask", "physical"])
def test_fpgm_removes_the_filter_nearest_the_geometric_median(mode):
    # a ring around (10, 10) with its centre, and a small filter far away: FPGM drops the
    # centre (the others stand in for it), L1 would drop the small one
    filters = torch.tensor([[10.0, 10], [14, 10], [6, 10], [10, 14], [10, 6], [0, 1]])
    assert kept_filters("fpgm", filters, 1 / 6, mode) == {1, 2, 3, 4, 5}
    assert kept_filters("l1_structured", filters, 1 / 6, mode) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("method", UNSTRUCTURED + STRUCTURED)
def test_mask_sparsity_is_within_one_percent_and_the_output_layer_untouched(method):
    torch.manual_seed(0)
    model = vgg(11)
    head = model.classifier.weight.detach().clone()
    pruner = Pruner(methods()[method], "mask")
    pruner.attach(model, torch.zeros(1, 3, 32, 32))
    pruner.prune(model, 0.3)
    report = pruner.prune(model, 0.6)  # gradual: 0.3 then 0.6 of the original, not 0.72
    achieved = report.row_sparsity if method in STRUCTURED else report.sparsity
    assert abs(achieved - 0.6) < 0.01
    assert torch.equal(model.classifier.weight, head)
    pruner.finalize(model)
    assert not any(name.endswith("_mask") for name, _ in model.named_buffers())
    assert (
        abs(
            sum(int((m.weight == 0).sum()) for m in model.modules() if isinstance(m, nn.Conv2d))
            / sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Conv2d))
            - 0.6
        )
        < 0.01
    )


@pytest.mark.parametrize("method", STRUCTURED)
def test_physical_keeps_shapes_and_channel_sparsity_within_one_percent(method):
    torch.manual_seed(0)
    model = vgg(11)
    x = torch.randn(2, 3, 32, 32)
    pruner = Pruner(methods()[method])
    pruner.attach(model, x)
    report = pruner.prune(model, 0.5)
    assert abs(report.row_sparsity - 0.5) < 0.01
    assert model(x).shape == (2, 10)
    assert model.classifier.out_features == 10
    assert [m.out_channels for m in model.features if isinstance(m, nn.Conv2d)] == [
        32,
        64,
        128,
        128,
        256,
        256,
        256,
        256,
    ]


def test_vae_at_0_8_has_study_3_shapes_and_flops():
    model = VAE()
    x = torch.rand(1, 784)
    assert count_flops(model, x).per_sample == 2 * 651_200 == 1_302_400
    pruner = Pruner(L1Structured(), min_channels=8, exclude=["fc4"])
    pruner.attach(model, x)
    pruner.prune(model, 0.8)
    shapes = [
        (m.in_features, m.out_features)
        for m in (model.fc1, model.fc21, model.fc22, model.fc3, model.fc4)
    ]
    assert shapes == [(784, 80), (80, 8), (80, 8), (8, 80), (80, 784)]
    assert count_flops(model, x).per_sample == 2 * 127_360 == 254_720
    model.train()
    recon, mu, logvar = model(torch.rand(3, 784))  # mu and logvar still line up
    assert recon.shape == (3, 784) and mu.shape == logvar.shape == (3, 8)


def test_vae_heads_lose_the_same_latent_units():
    torch.manual_seed(1)
    model, reference = VAE(), None
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    pruner = Pruner(L2Structured(), exclude=["output_layer"])
    pruner.attach(model, torch.rand(2, 784))
    pruner.prune(model, 0.5)
    rows21 = [reference["fc21.bias"].tolist().index(b) for b in model.fc21.bias.tolist()]
    rows22 = [reference["fc22.bias"].tolist().index(b) for b in model.fc22.bias.tolist()]
    assert rows21 == rows22 and len(rows21) == 10


def test_channel_counts_round_as_users_expect():
    assert units_to_keep(400, 0.8) == 80
    assert units_to_keep(20, 0.8, minimum=8) == 8
    assert units_to_keep(128, 0.9) == 13


def test_physical_pruning_still_trains():
    torch.manual_seed(0)
    model = vgg(11)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    pruner = Pruner(L1Structured())
    pruner.attach(model, x[:2])
    pruner.prune(model, 0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_pruner_equals_a_fresh_model_of_the_smaller_size(bidirectional):
    torch.manual_seed(0)
    model = LSTMClassifier(
        300, embedding_dim=16, hidden_size=12, num_layers=2, bidirectional=bidirectional
    ).eval()
    original = {n: p.detach().clone() for n, p in model.named_parameters()}
    tokens = torch.randint(1, 300, (5, 9))
    pruner = LSTMPruner(model, tokens, ["lstm"], l2_scores)
    assert pruner.prune(model, 0.5) == {"lstm": (12, 6)}
    (plan,) = pruner.plans
    assert model.lstm.hidden_size == plan.hidden_after == 6
    fresh = LSTMClassifier(
        300, embedding_dim=16, hidden_size=6, num_layers=2, bidirectional=bidirectional
    ).eval()
    dirs = 2 if bidirectional else 1
    state = {"embedding.weight": original["embedding.weight"]}
    for layer in range(2):
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            units = plan.keep[(layer, d)]
            rows = _gate_rows(units, 12)
            w_ih = original["lstm.weight_ih" + sfx][rows]
            if layer:
                w_ih = w_ih[:, torch.cat([plan.keep[(0, k)] + 12 * k for k in range(dirs)])]
            state["lstm.weight_ih" + sfx] = w_ih
            state["lstm.weight_hh" + sfx] = original["lstm.weight_hh" + sfx][rows][:, units]
            state["lstm.bias_ih" + sfx] = original["lstm.bias_ih" + sfx][rows]
            state["lstm.bias_hh" + sfx] = original["lstm.bias_hh" + sfx][rows]
    top = torch.cat([plan.keep[(1, k)] + 12 * k for k in range(dirs)])
    state["fc.weight"] = original["fc.weight"][:, top]
    state["fc.bias"] = original["fc.bias"]
    fresh.load_state_dict(state)
    assert torch.equal(model(tokens), fresh(tokens))


def test_lstm_units_ranked_by_norm_across_gate_blocks():
    model = LSTMClassifier(50, embedding_dim=4, hidden_size=4, num_layers=1)
    with torch.no_grad():
        for p in model.lstm.parameters():
            p.fill_(1.0)
        for gate in range(4):  # unit 2 is the weakest in every gate block
            model.lstm.weight_ih_l0[gate * 4 + 2].fill_(0.01)
            model.lstm.weight_hh_l0[gate * 4 + 2].fill_(0.01)
    pruner = LSTMPruner(model, torch.randint(1, 50, (2, 3)), ["lstm"], l1_scores)
    pruner.prune(model, 0.25)
    (plan,) = pruner.plans
    assert plan.keep[(0, 0)].tolist() == [0, 1, 3]


def test_lstm_embedding_dims_pruned_on_request():
    model = LSTMClassifier(100, embedding_dim=20, hidden_size=10)
    tokens = torch.randint(1, 100, (3, 7))
    pruner = Pruner(L2Structured(), embedding=True)
    pruner.attach(model, tokens)
    pruner.prune(model, 0.5)
    assert model.embedding.embedding_dim == 10 and model.lstm.input_size == 10
    assert model(tokens).shape == (3, 2)


@pytest.mark.parametrize(
    "build,example",
    [
        (lambda: vgg(11), torch.randn(2, 3, 32, 32)),
        (
            lambda: LSTMClassifier(100, embedding_dim=16, hidden_size=8),
            torch.randint(1, 100, (2, 5)),
        ),
        (lambda: VAE(), torch.rand(2, 784)),
    ],
)
def test_saved_pruned_models_reload_with_identical_outputs(tmp_path, build, example):
    torch.manual_seed(0)
    model = build().eval()
    pruner = Pruner(L1Structured())
    pruner.attach(model, example)
    pruner.prune(model, 0.5)
    path = prune_io.save(model, tmp_path / "pruned.pt")
    reloaded = prune_io.load(path).eval()
    for a, b in zip(
        model(example) if isinstance(model(example), tuple) else [model(example)],
        reloaded(example) if isinstance(reloaded(example), tuple) else [reloaded(example)],
        strict=True,
    ):
        assert torch.equal(a, b)


def test_saved_mask_model_has_masks_folded_in(tmp_path):
    model = VAE().eval()
    pruner = Pruner(L1Unstructured())
    pruner.attach(model, torch.rand(2, 784))
    pruner.prune(model, 0.5)
    reloaded = prune_io.load(prune_io.save(model, tmp_path / "m.pt")).eval()
    assert not hasattr(reloaded.fc1, "weight_mask")
    x = torch.rand(2, 784)
    assert torch.equal(model(x)[0], reloaded(x)[0])


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"targets": ["Nope"]}, "targets"),
        ({"targets": ["fc9.weight"]}, "targets"),
        ({"exclude": ["Linear"]}, "exclude"),
    ],
)
def test_bad_targets_are_config_errors(kwargs, key):
    pruner = Pruner(L1Unstructured(), **kwargs)
    with pytest.raises(ConfigError) as info:
        pruner.attach(VAE(), torch.rand(2, 784))
    assert info.value.key == key
    assert "\n" not in str(info.value)


def test_bad_amount_and_mode_are_config_errors():
    pruner = Pruner(L1Unstructured())
    pruner.attach(VAE(), torch.rand(2, 784))
    for amount in (1.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match=r"amount=.* expected a fraction in \[0, 1\)"):
            pruner.prune(VAE(), amount)
    with pytest.raises(ConfigError, match="mode='physical'"):
        Pruner(L1Unstructured(), "physical")


class Untraceable(nn.Module):
    """Leaves autograd through numpy: torch-pruning's trace sees no layer feeding another."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.from_numpy(self.fc1(x).detach().numpy())
        return self.fc2(h)


def test_physical_mode_on_an_untraceable_model_is_one_line():
    pruner = Pruner(L1Structured())
    with pytest.raises(IncompatibleError) as info:
        pruner.attach(Untraceable(), torch.randn(2, 4))
    assert "use prune.mode=mask" in str(info.value) and "\n" not in str(info.value)
