"""A vmappable ``nn.LSTM``: the same parameters, computed from Linear-gate matmuls.

``vmap`` has no batching rule for ``aten::lstm``, so :class:`GateLSTM` (as HFTA's LSTMs) computes
the gates with plain tensor ops, all of which vmap batches, and keeps ``nn.LSTM``'s parameter
names and shapes so a state_dict moves between the two unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from hpml.errors import IncompatibleError

# Recurrent modules with no vmappable stand-in here (yet): vmappable() refuses them by name.
UNSUPPORTED = (nn.GRU, nn.RNN, nn.LSTMCell, nn.GRUCell, nn.RNNCell)
SUPPORTED = "nn.LSTM (as GateLSTM), Linear, Conv, BatchNorm, Embedding, Dropout"


class GateLSTM(nn.Module):
    """``nn.LSTM`` (bias, no projection) as per-step gate matmuls, so ``torch.func.vmap`` runs it.

    Same constructor, parameter names, shapes, init, gate order (i, f, g, o) and ``forward``
    contract as ``nn.LSTM``; slower than its fused kernel, so only for where vmap needs it.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not bias or proj_size:
            raise IncompatibleError(
                f"GateLSTM supports bias=True and proj_size=0 only, got bias={bias} "
                f"proj_size={proj_size}"
            )
        if not 0.0 <= float(dropout) <= 1.0:
            raise ValueError(f"dropout should be a number in range [0, 1], got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = True, batch_first, bidirectional
        self.dropout, self.proj_size = float(dropout), 0
        factory = {"device": device, "dtype": dtype}
        gates = 4 * hidden_size
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else hidden_size * self.num_directions
            for suffix in self._suffixes():
                name = f"l{layer}{suffix}"
                shapes = {
                    f"weight_ih_{name}": (gates, layer_in),
                    f"weight_hh_{name}": (gates, hidden_size),
                    f"bias_ih_{name}": (gates,),
                    f"bias_hh_{name}": (gates,),
                }
                for key, shape in shapes.items():
                    self.register_parameter(key, nn.Parameter(torch.empty(shape, **factory)))
        self.reset_parameters()

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    def reset_parameters(self) -> None:
        """``nn.LSTM``'s init: every parameter uniform in +-1/sqrt(hidden_size)."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def flatten_parameters(self) -> None:
        """No-op, for code written against ``nn.LSTM`` (there is no cuDNN weight buffer here)."""

    extra_repr = nn.LSTM.extra_repr  # the same attributes, so the same line as nn.LSTM's

    def forward(
        self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """``nn.LSTM.forward``: ``(output, (h_n, c_n))`` of the same shapes; no PackedSequence."""
        if not isinstance(input, Tensor):
            raise IncompatibleError(
                f"GateLSTM takes a padded Tensor, not {type(input).__name__} (no PackedSequence)"
            )
        unbatched = input.dim() == 2
        if unbatched:  # (T, F): one sequence, and hx is (D * num_layers, H)
            x = input.unsqueeze(1)
            hx = None if hx is None else (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        else:
            x = input.transpose(0, 1) if self.batch_first else input
        # x is time-major from here: (T, B, F)
        states = self.num_layers * self.num_directions
        if hx is None:
            hx = (x.new_zeros(states, x.shape[1], self.hidden_size),) * 2
        h0, c0 = hx
        h_n: list[Tensor] = []
        c_n: list[Tensor] = []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = F.dropout(x, self.dropout, training=True)
            outputs = []
            for direction, suffix in enumerate(self._suffixes()):
                index = layer * self.num_directions + direction
                out, h, c = self._direction(x, f"l{layer}{suffix}", h0[index], c0[index], direction)
                outputs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)
        h_stack, c_stack = torch.stack(h_n), torch.stack(c_n)
        if unbatched:
            return x.squeeze(1), (h_stack.squeeze(1), c_stack.squeeze(1))
        output = x.transpose(0, 1) if self.batch_first else x
        return output, (h_stack, c_stack)

    def _direction(
        self, x: Tensor, name: str, h: Tensor, c: Tensor, direction: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One layer in one direction over time-major ``x``: ``(outputs (T, B, H), h_T, c_T)``."""
        w_ih, w_hh = getattr(self, f"weight_ih_{name}"), getattr(self, f"weight_hh_{name}")
        b_ih, b_hh = getattr(self, f"bias_ih_{name}"), getattr(self, f"bias_hh_{name}")
        if direction:  # the reverse direction reads the sequence back to front
            x = x.flip(0)
        # The input projection of every step at once: (T, B, 4H).
        projected = torch.matmul(x, w_ih.t()) + (b_ih + b_hh)
        w_hh_t = w_hh.t()
        steps = []
        # unbind, not projected[t]: each indexing's backward would write a zero-filled copy of
        # the whole (T, B, 4H) projection, O(T^2) memory traffic; unbind's is one stack
        for step in projected.unbind(0):
            gates = torch.addmm(step, h, w_hh_t)
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            steps.append(h)
        out = torch.stack(steps)
        return (out.flip(0) if direction else out), h, c


def lstm_options(lstm: nn.LSTM) -> dict[str, Any]:
    """``lstm``'s constructor arguments besides its sizes, its device and dtype included: what
    an LSTM built in its place (of another width, or another class) takes."""
    names = ("num_layers", "bias", "batch_first", "dropout", "bidirectional", "proj_size")
    weight = lstm.weight_ih_l0
    return {n: getattr(lstm, n) for n in names} | {"device": weight.device, "dtype": weight.dtype}


def from_lstm(lstm: nn.LSTM) -> GateLSTM:
    """A :class:`GateLSTM` of ``lstm``'s config holding a copy of its parameters, on its
    device and dtype and in its training mode: it drops in where ``lstm`` was."""
    gate = GateLSTM(lstm.input_size, lstm.hidden_size, **lstm_options(lstm))
    gate.load_state_dict(lstm.state_dict())
    return gate.train(lstm.training)


def vmappable(module: nn.Module) -> nn.Module:
    """``module`` with every ``nn.LSTM`` (at any depth, itself included) swapped in place for a
    GateLSTM; other recurrent modules are refused before anything is swapped."""
    for path, sub in module.named_modules():
        if isinstance(sub, UNSUPPORTED):
            where = path or "the model"
            raise IncompatibleError(
                f"{where} is an nn.{type(sub).__name__}, which torch.func.vmap cannot batch: "
                f"fused arrays support {SUPPORTED}"
            )
    if isinstance(module, nn.LSTM):
        return from_lstm(module)
    lstms = [path for path, sub in module.named_modules() if isinstance(sub, nn.LSTM)]
    for path in lstms:
        module.set_submodule(path, from_lstm(module.get_submodule(path)))
    return module
