"""Physical pruning of ``nn.LSTM`` hidden units (and optionally embedding dimensions).

torch-pruning cannot trace multi-layer LSTMs, so hpml slices them itself: hidden unit ``j`` owns
rows ``j``, ``H + j``, ``2H + j``, ``3H + j`` (the four gates) of ``weight_ih``, ``weight_hh`` and
both biases, column ``j`` of ``weight_hh`` and the matching input column of the next layer (or of
the Linear reading the LSTM, found with forward hooks). Every layer and direction keeps the same
number of units (``nn.LSTM`` has one ``hidden_size``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from hpml.analysis.compare import evaluating
from hpml.errors import IncompatibleError
from hpml.optimize.fuse.lstm import lstm_options
from hpml.optimize.prune.amount import units_to_keep

Scores = Callable[[Tensor], Tensor]


def _suffix(layer: int, direction: int) -> str:
    return f"_l{layer}" + ("_reverse" if direction else "")


def unit_rows(lstm: nn.LSTM, layer: int, direction: int) -> Tensor:
    """``H x (4 * (I + H))``: each hidden unit's incoming weights across the four gate blocks."""
    hidden = lstm.hidden_size
    w_ih = getattr(lstm, "weight_ih" + _suffix(layer, direction)).detach()
    w_hh = getattr(lstm, "weight_hh" + _suffix(layer, direction)).detach()
    gates = torch.cat([w_ih, w_hh], dim=1).reshape(4, hidden, -1)
    return gates.permute(1, 0, 2).reshape(hidden, -1)


def top_units(importance: Tensor, keep: int) -> Tensor:
    """Indices of the ``keep`` most important units, in their original order."""
    return torch.sort(torch.argsort(importance, descending=True)[:keep]).values


def _gate_rows(keep: Tensor, hidden: int) -> Tensor:
    return torch.cat([keep + gate * hidden for gate in range(4)])


def shrink_lstm(
    lstm: nn.LSTM, keep: dict[tuple[int, int], Tensor], input_keep: Tensor | None = None
) -> nn.LSTM:
    """A new LSTM with hidden units ``keep[(layer, direction)]`` (all of one length) and input
    features ``input_keep``."""
    if lstm.proj_size:
        raise IncompatibleError(
            "physical pruning of an LSTM with proj_size is not supported; use prune.mode=mask"
        )
    new_hidden = len(next(iter(keep.values())))
    hidden, dirs = lstm.hidden_size, 2 if lstm.bidirectional else 1
    device = lstm.weight_ih_l0.device
    input_keep = None if input_keep is None else input_keep.to(device)
    new_input = lstm.input_size if input_keep is None else len(input_keep)
    new = nn.LSTM(new_input, new_hidden, **lstm_options(lstm))
    new.train(lstm.training)
    with torch.no_grad():
        for layer in range(lstm.num_layers):
            if layer == 0:
                columns = input_keep
            else:
                columns = torch.cat(
                    [keep[(layer - 1, d)].to(device) + d * hidden for d in range(dirs)]
                )
            for direction in range(dirs):
                units = keep[(layer, direction)].to(device)
                rows = _gate_rows(units, hidden)
                sfx = _suffix(layer, direction)
                w_ih = getattr(lstm, "weight_ih" + sfx)[rows]
                if columns is not None:
                    w_ih = w_ih[:, columns]
                getattr(new, "weight_ih" + sfx).copy_(w_ih)
                getattr(new, "weight_hh" + sfx).copy_(
                    getattr(lstm, "weight_hh" + sfx)[rows][:, units]
                )
                if lstm.bias:
                    for name in ("bias_ih", "bias_hh"):
                        getattr(new, name + sfx).copy_(getattr(lstm, name + sfx)[rows])
    return new


def _keep_columns(module: nn.Module, columns: Tensor) -> nn.Module:
    """``module`` with only ``columns`` of its weight left (its input features)."""
    with torch.no_grad():
        module.weight = nn.Parameter(module.weight[:, columns.to(module.weight.device)].clone())
    return module


def _call_order(model: nn.Module, example: Any) -> list[str]:
    """Names of the modules with own parameters, in the order a forward pass calls them."""
    order: list[str] = []
    handles = [
        m.register_forward_pre_hook(lambda _m, _a, n=name: order.append(n))
        for name, m in model.named_modules()
        if name and any(True for _ in m.parameters(recurse=False))
    ]
    try:
        with evaluating([model]), torch.no_grad():
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    return order


@dataclass
class LSTMPlan:
    """What one LSTM lost: the hidden units it kept per (layer, direction)."""

    name: str
    hidden_before: int
    hidden_after: int
    keep: dict[tuple[int, int], Tensor]


class LSTMPruner:
    """Remove hidden units of each named ``nn.LSTM`` of ``model`` (in place: modules are swapped).

    Build it on the unpruned model: ``amount`` is of its widths (never fewer than
    ``min_channels`` units, a multiple of ``round_to`` kept); ``scores`` ranks rows, the lowest
    go first. With ``embedding=True`` the Embedding feeding the LSTM loses the same share of its
    dimensions, rounded the same way.
    """

    def __init__(
        self,
        model: nn.Module,
        example: Any,
        lstms: list[str],
        scores: Scores,
        min_channels: int = 1,
        embedding: bool = False,
        round_to: int = 1,
    ) -> None:
        self.scores, self.min_channels, self.embedding = scores, min_channels, embedding
        self.round_to = round_to
        self.plans: list[LSTMPlan] = []
        order = _call_order(model, example)
        self.links: dict[str, tuple[str, str | None]] = {}
        self.original: dict[str, tuple[int, int]] = {}
        for name in lstms:
            lstm = model.get_submodule(name)
            if name not in order:
                raise IncompatibleError(
                    f"{name} is not called by {type(model).__name__}'s forward; nothing to prune"
                )
            width = lstm.hidden_size * (2 if lstm.bidirectional else 1)
            at = order.index(name)
            after = [(n, model.get_submodule(n)) for n in order[at + 1 :]]
            linears = [n for n, m in after if isinstance(m, nn.Linear) and m.in_features == width]
            if not linears:
                raise IncompatibleError(
                    f"physical LSTM pruning found no Linear reading {name}'s {width} output "
                    f"features in {type(model).__name__}; use prune.mode=mask"
                )
            before = model.get_submodule(order[at - 1]) if at > 0 else None
            fed = isinstance(before, nn.Embedding) and before.embedding_dim == lstm.input_size
            feeder = order[at - 1] if fed else None
            self.links[name] = (linears[0], feeder)
            self.original[name] = (lstm.hidden_size, lstm.input_size)

    def _keep(self, original: int, amount: float) -> int:
        return units_to_keep(original, amount, self.min_channels, self.round_to)

    def prune(self, model: nn.Module, amount: float) -> dict[str, tuple[int, int]]:
        """Cut each LSTM to ``amount`` of its original width; ``{lstm: (before, after)}``."""
        plans = []
        for name, (consumer_name, feeder_name) in self.links.items():
            lstm = model.get_submodule(name)
            hidden0, input0 = self.original[name]
            keep_n = min(lstm.hidden_size, self._keep(hidden0, amount))
            dirs = 2 if lstm.bidirectional else 1
            keep = {
                (layer, d): top_units(self.scores(unit_rows(lstm, layer, d).float()), keep_n)
                for layer in range(lstm.num_layers)
                for d in range(dirs)
            }
            input_keep = None
            if self.embedding and feeder_name is not None:
                keep_e = min(lstm.input_size, self._keep(input0, amount))
                columns = lstm.weight_ih_l0.detach().float()
                if lstm.bidirectional:
                    columns = torch.cat([columns, lstm.weight_ih_l0_reverse.detach().float()])
                input_keep = top_units(self.scores(columns.t()).cpu(), keep_e)
            plan = LSTMPlan(name, lstm.hidden_size, keep_n, keep)
            top = lstm.num_layers - 1  # the output features that survive: its units per direction
            columns_out = torch.cat([keep[(top, d)] + d * lstm.hidden_size for d in range(dirs)])
            new = shrink_lstm(lstm, keep, input_keep)
            consumer = _keep_columns(model.get_submodule(consumer_name), columns_out)
            consumer.in_features = len(columns_out)
            if input_keep is not None and feeder_name is not None:
                feeder = _keep_columns(model.get_submodule(feeder_name), input_keep)
                feeder.embedding_dim = len(input_keep)
            model.set_submodule(name, new)
            plans.append(plan)
        self.plans = plans
        return {p.name: (p.hidden_before, p.hidden_after) for p in plans}
