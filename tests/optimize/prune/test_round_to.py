"""``round_to``: kept widths rounded as torch-pruning rounds them, and FLOPs counted on the
rounded shapes (checked against counts made here from the pruned modules' real shapes)."""

from __future__ import annotations

import pytest
import torch
import torch_pruning as tp
from torch import nn

from hpml.analysis.flops import count_flops
from hpml.errors import ConfigError
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vae import VAE
from hpml.models.nets.vgg import vgg
from hpml.optimize.prune import Pruner
from hpml.optimize.prune.amount import units_to_keep, units_to_remove
from hpml.optimize.prune.methods import L1Structured, L1Unstructured, L2Structured


def torch_pruning_keeps(total: int, amount: float, round_to: int) -> int:
    """Channels torch-pruning 1.6's ``round_to`` keeps of ``total`` when ``amount`` removes
    some (its ``BasePruner._round_to``, which uses nothing of the pruner itself)."""
    n_pruned = units_to_remove(total, amount)
    if n_pruned == 0:
        return total
    return total - tp.pruner.BasePruner._round_to(None, n_pruned, total, round_to)


@pytest.mark.parametrize("round_to", [8, 16])
def test_kept_widths_are_torch_pruning_s_where_it_keeps_at_least_round_to(round_to):
    for total in range(1, 600, 7):
        for amount in (0.0, 0.1, 0.25, 0.5, 0.7, 0.8, 0.95):
            ours = units_to_keep(total, amount, round_to=round_to)
            theirs = torch_pruning_keeps(total, amount, round_to)
            assert ours <= total
            assert ours == total or ours % round_to == 0, (total, amount, ours)
            if theirs >= round_to or theirs == total:
                assert ours == theirs, (total, amount)
            else:  # torch-pruning may keep 0; hpml keeps round_to (or all, if narrower)
                assert ours == min(round_to, total), (total, amount)


def test_rounding_keeps_min_channels_round_to_and_no_more_than_the_layer_has():
    assert units_to_keep(400, 0.8, round_to=8) == 80  # already a multiple: exact
    assert units_to_keep(20, 0.5, round_to=8) == 8  # 10 rounded down
    assert units_to_keep(20, 0.9, round_to=8) == 8  # 2: never fewer than round_to
    assert units_to_keep(6, 0.5, round_to=8) == 6  # narrower than round_to: kept whole
    assert units_to_keep(20, 0.0, round_to=8) == 20  # nothing removed: nothing rounded
    assert units_to_keep(100, 0.5, minimum=12, round_to=8) == 48
    assert units_to_keep(100, 0.95, minimum=12, round_to=8) == 16  # 12 rounded up


def conv_linear_flops(model: nn.Module, x: torch.Tensor) -> int:
    """2 x MAC of every Conv2d (out_h * out_w * k_h * k_w * c_in / groups * c_out) and Linear
    (in * out) on one sample, from the shapes the modules really have and produce."""
    found: list[int] = []

    def count(module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        if isinstance(module, nn.Conv2d):
            kh, kw = module.kernel_size
            c_in = module.in_channels // module.groups
            out_h, out_w = output.shape[-2:]
            found.append(2 * out_h * out_w * kh * kw * c_in * module.out_channels)
        elif isinstance(module, nn.Linear):
            found.append(2 * module.in_features * module.out_features)

    handles = [m.register_forward_hook(count) for m in model.modules()]
    with torch.no_grad():
        model.eval()(x)
    for handle in handles:
        handle.remove()
    return sum(found)


def test_vgg_rounded_widths_and_flops_follow_the_real_shapes():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    widths = {}
    for round_to in (1, 8):
        model = vgg(11)
        before = count_flops(model, x).per_sample
        pruner = Pruner(L1Structured(), round_to=round_to)
        pruner.attach(model, torch.randn(2, 3, 32, 32))
        report = pruner.prune(model, 0.7)
        convs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
        assert {n: after for n, (_, after) in report.widths.items()} == {
            n: m.out_channels for n, m in convs.items()
        }
        widths[round_to] = [m.out_channels for m in convs.values()]
        after = count_flops(model, x).per_sample
        assert after == conv_linear_flops(model, x)
        assert before == conv_linear_flops(vgg(11), x)
        assert model.classifier.in_features == widths[round_to][-1]
    assert widths[1] == [19, 38, 77, 77, 154, 154, 154, 154]  # 64 * 0.3 = 19.2, ...
    assert widths[8] == [16, 32, 72, 72, 152, 152, 152, 152]


def test_vae_rounded_heads_and_flops_are_the_sum_of_in_times_out():
    model = VAE()
    x = torch.rand(1, 784)
    pruner = Pruner(L1Structured(), exclude=["fc4"], round_to=8)
    pruner.attach(model, torch.rand(2, 784))
    pruner.prune(model, 0.5)
    linears = [model.fc1, model.fc21, model.fc22, model.fc3, model.fc4]
    shapes = [(m.in_features, m.out_features) for m in linears]
    assert shapes == [(784, 200), (200, 8), (200, 8), (8, 200), (200, 784)]  # heads: 10 -> 8
    assert count_flops(model, x).per_sample == 2 * sum(i * o for i, o in shapes)
    assert sum(p.numel() for p in model.parameters()) == sum(i * o + o for i, o in shapes)


def test_lstm_hidden_units_and_embedding_dims_round_to_a_multiple():
    torch.manual_seed(0)
    model = LSTMClassifier(100, embedding_dim=40, hidden_size=20, num_layers=2)
    tokens = torch.randint(1, 100, (1, 7))
    pruner = Pruner(L2Structured(), embedding=True, round_to=8)
    pruner.attach(model, torch.randint(1, 100, (2, 7)))
    assert pruner.prune(model, 0.5).widths == {"lstm": (20, 8)}  # 10 rounded down
    lstm = model.lstm
    assert (lstm.hidden_size, lstm.input_size, model.embedding.embedding_dim) == (8, 16, 16)
    # per token and layer, 2 x 4H x (I + H) (the gates), then the classifier's in x out
    hidden = lstm.hidden_size
    inputs = [lstm.input_size, hidden]
    expected = 2 * tokens.shape[1] * sum(4 * hidden * (i + hidden) for i in inputs)
    expected += 2 * model.fc.in_features * model.fc.out_features
    assert count_flops(model, tokens).per_sample == expected


@pytest.mark.parametrize("value", [0, -8, 2.5, True, "8"])
def test_bad_round_to_is_one_line_naming_it(value):
    with pytest.raises(ConfigError) as info:
        Pruner(L1Structured(), round_to=value)
    assert info.value.key == "round_to" and "\n" not in str(info.value)
    assert "expected a positive integer" in str(info.value)


@pytest.mark.parametrize("method", [L1Unstructured(), L1Structured()])
def test_round_to_in_mask_mode_is_refused(method):
    assert Pruner(method, "mask", round_to=1).round_to == 1
    with pytest.raises(ConfigError, match=r"round_to=8 is invalid: expected 1 for .* mask mode"):
        Pruner(method, "mask", round_to=8)
