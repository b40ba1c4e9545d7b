"""GateLSTM: nn.LSTM's numbers and gradients from vmappable ops, swapped in by vmappable()."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from hpml.errors import IncompatibleError
from hpml.models.nets.lstm import LSTMClassifier
from hpml.optimize.fuse.lstm import GateLSTM, from_lstm, vmappable

SIZES = {"input_size": 5, "hidden_size": 7}


def seeded_lstm(seed: int, **kwargs) -> nn.LSTM:
    torch.manual_seed(seed)
    return nn.LSTM(**SIZES, **kwargs).eval()


@pytest.mark.parametrize(
    ("num_layers", "bidirectional", "batch_first"),
    [(1, False, False), (2, True, True), (2, False, True), (3, True, False)],
)
@pytest.mark.parametrize("with_hx", [False, True])
def test_gate_lstm_matches_nn_lstm(
    num_layers: int, bidirectional: bool, batch_first: bool, with_hx: bool
) -> None:
    dropout = 0.3 if num_layers > 1 else 0.0  # configured, but eval mode must ignore it
    config = {"bidirectional": bidirectional, "batch_first": batch_first, "dropout": dropout}
    lstm = seeded_lstm(0, num_layers=num_layers, **config)
    gate = from_lstm(lstm)
    assert isinstance(gate, GateLSTM) and not gate.training
    assert gate.bidirectional is bidirectional and gate.batch_first is batch_first
    assert [(k, v.shape) for k, v in gate.state_dict().items()] == [
        (k, v.shape) for k, v in lstm.state_dict().items()
    ]
    generator = torch.Generator().manual_seed(1)
    batch, steps, states = 4, 6, num_layers * (2 if bidirectional else 1)
    shape = (batch, steps) if batch_first else (steps, batch)
    x = torch.randn(*shape, SIZES["input_size"], generator=generator)
    hx = None
    if with_hx:
        hidden = SIZES["hidden_size"]
        hx = tuple(torch.randn(states, batch, hidden, generator=generator) for _ in range(2))

    want_out, (want_h, want_c) = lstm(x, hx)
    got_out, (got_h, got_c) = gate(x, hx)
    assert got_out.shape == want_out.shape and got_h.shape == want_h.shape == got_c.shape
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_h, want_h, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_c, want_c, rtol=0, atol=1e-6)

    weights = torch.randn(want_out.shape, generator=generator)
    for out, h, c in ((want_out, want_h, want_c), (got_out, got_h, got_c)):
        ((out * weights).sum() + h.square().sum() + c.sum()).backward()
    for name, param in lstm.named_parameters():
        grad = gate.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, param.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_unbatched_input_matches() -> None:
    lstm = seeded_lstm(2, num_layers=2, bidirectional=True)
    x = torch.randn(5, SIZES["input_size"], generator=torch.Generator().manual_seed(3))
    want_out, (want_h, _) = lstm(x)
    got_out, (got_h, _) = from_lstm(lstm)(x)
    assert got_out.shape == (5, 14) and got_h.shape == (4, 7)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_h, want_h, rtol=0, atol=1e-6)


def test_vmap_over_stacked_gate_lstms_gives_each_members_output() -> None:
    lstms = [
        seeded_lstm(seed, num_layers=2, bidirectional=True, batch_first=True) for seed in (0, 1, 2)
    ]
    gates = [from_lstm(lstm) for lstm in lstms]
    params, buffers = stack_module_state(gates)
    base = GateLSTM(**SIZES, num_layers=2, bidirectional=True, batch_first=True).to("meta")
    x = torch.randn(4, 6, SIZES["input_size"], generator=torch.Generator().manual_seed(1))

    fused = vmap(lambda p, b, x: functional_call(base, (p, b), (x,))[0], in_dims=(0, 0, None))
    out = fused(params, buffers, x)

    assert out.shape == (3, 4, 6, 14)
    for member, lstm in enumerate(lstms):
        torch.testing.assert_close(out[member], lstm(x)[0], rtol=0, atol=1e-6)
    assert not torch.allclose(out[0], out[1])


def test_vmap_refuses_nn_lstm_itself() -> None:
    """Why GateLSTM exists: if torch ever batches aten::lstm, this fails and says so."""
    lstms = [seeded_lstm(seed) for seed in (0, 1)]
    params, buffers = stack_module_state(lstms)
    x = torch.randn(6, 4, SIZES["input_size"])
    with pytest.raises(RuntimeError, match="lstm"):
        vmap(lambda p, b: functional_call(lstms[0], (p, b), (x,))[0])(params, buffers)


def test_vmappable_swaps_the_classifier_lstm_and_keeps_its_logits() -> None:
    torch.manual_seed(0)
    net = LSTMClassifier(vocab_size=50).eval()
    keys = list(net.state_dict())
    tokens = torch.randint(1, 50, (8, 12), generator=torch.Generator().manual_seed(1))
    want = net(tokens)

    assert vmappable(net) is net
    assert isinstance(net.lstm, GateLSTM) and not net.lstm.training
    assert list(net.state_dict()) == keys
    torch.testing.assert_close(net(tokens), want, rtol=0, atol=1e-6)


def test_vmappable_of_an_lstm_itself_and_of_nested_ones() -> None:
    assert isinstance(vmappable(seeded_lstm(0)), GateLSTM)
    net = nn.Sequential(nn.Linear(3, 5), nn.ModuleDict({"rnn": nn.ModuleList([seeded_lstm(1)])}))
    vmappable(net)
    assert isinstance(net[1]["rnn"][0], GateLSTM) and isinstance(net[0], nn.Linear)


@pytest.mark.parametrize("rnn", [nn.GRU(5, 7), nn.RNN(5, 7), nn.LSTMCell(5, 7), nn.GRUCell(5, 7)])
def test_vmappable_refuses_other_recurrent_modules(rnn: nn.Module) -> None:
    lstm = seeded_lstm(0)
    net = nn.ModuleDict({"encoder": nn.Sequential(nn.Linear(5, 5), rnn), "lstm": lstm})
    kind = type(rnn).__name__
    with pytest.raises(IncompatibleError, match=rf"encoder\.1 is an nn\.{kind}\b.*nn\.LSTM"):
        vmappable(net)
    assert net["lstm"] is lstm  # refused before anything was swapped


def test_unsupported_configs_are_refused() -> None:
    with pytest.raises(IncompatibleError, match="proj_size"):
        from_lstm(nn.LSTM(5, 7, proj_size=3))
    with pytest.raises(IncompatibleError, match="bias"):
        from_lstm(nn.LSTM(5, 7, bias=False))


def test_dropout_between_layers_only_in_training() -> None:
    gate = GateLSTM(**SIZES, num_layers=2, dropout=0.5)
    x = torch.randn(6, 4, SIZES["input_size"])
    torch.manual_seed(0)
    first = gate(x)[0]
    torch.manual_seed(1)
    assert not torch.allclose(first, gate(x)[0])
    gate.eval()
    torch.testing.assert_close(gate(x)[0], gate(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("randomness", ["different", "same"])
def test_dropout_under_vmap_follows_randomness(randomness: str) -> None:
    torch.manual_seed(0)
    gate = GateLSTM(**SIZES, num_layers=2, dropout=0.5)
    params, buffers = stack_module_state([gate, gate])  # two identical members
    x = torch.randn(6, 4, SIZES["input_size"])
    call = lambda p, b, x: functional_call(gate, (p, b), (x,))[0]  # noqa: E731
    out = vmap(call, in_dims=(0, 0, None), randomness=randomness)(params, buffers, x)
    assert torch.equal(out[0], out[1]) is (randomness == "same")
