"""FLOPs of a model on an example input: ``FlopCounterMode`` plus the rules it lacks.

1 multiply-accumulate = 2 FLOPs, conv and matmul only, as ``torch.utils.flop_counter`` counts;
element-wise ops, norms and activations count 0. ``FlopCounterMode`` counts nothing for
``nn.LSTM`` (``aten.mkldnn_rnn_layer``, ``aten._cudnn_rnn``) nor CPU scaled-dot-product
attention: the rules below count them as their matmul decomposition would be.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from hpml.tensors import as_args, tensors_in

aten = torch.ops.aten
NO_AUTOGRAD_KERNEL = r".*: an autograd kernel was not registered to the Autograd key"
Shape = Sequence[int]


def _rnn_rule(factor: int, stacked: bool) -> Callable[..., int]:
    """A rule for an RNN op: ``factor`` x 2 x cell steps x elements of its 2-D weights. The
    weights are the op's first two arguments after the input (``w_ih``, ``w_hh``: one layer in
    one direction, mkldnn's CPU op), or ``stacked`` in one list (cuDNN's op: all layers and
    directions). The input's shape ends in the feature size whatever its layout, so its other
    dimensions multiply to the cell steps. A backward has ``factor`` 2: gradients for inputs and
    for weights, two products per forward product."""

    def rule(input_shape: Shape, *args: Any, **kwargs: Any) -> int:
        weights = args[0] if stacked else args[:2]
        return factor * 2 * prod(input_shape[:-1]) * sum(prod(w) for w in weights if len(w) == 2)

    return rule


def cpu_sdpa_flop(query: Shape, key: Shape, value: Shape, *args: Any, **kwargs: Any) -> int:
    """``Q K^T`` and ``softmax(.) V``: 4 x B x H x S_q x S_kv x D, as torch counts it on CUDA."""
    return sdpa_flop_count(query, key, value)


def cpu_sdpa_backward_flop(
    grad_out: Shape, query: Shape, key: Shape, value: Shape, *args: Any, **kwargs: Any
) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


MISSING_RULES = {
    aten.mkldnn_rnn_layer: _rnn_rule(1, stacked=False),
    aten.mkldnn_rnn_layer_backward: _rnn_rule(2, stacked=False),
    aten._cudnn_rnn: _rnn_rule(1, stacked=True),
    aten._cudnn_rnn_backward: _rnn_rule(2, stacked=True),
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_sdpa_backward_flop,
}


@dataclass(frozen=True)
class FlopCount:
    """FLOPs (2 x MAC) of one pass over a batch, in total, by module path (``""``: the whole
    model; a parent includes its children) and by operator; with backward, its ``forward`` half.
    """

    total: int
    batch_size: int
    by_module: dict[str, int] = field(default_factory=dict)
    by_op: dict[str, int] = field(default_factory=dict)
    forward: FlopCount | None = None

    @property
    def per_sample(self) -> float:
        return self.total / self.batch_size


def _leaf_free(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each parameter as a non-leaf view of itself, to run the counted pass with:
    ``FlopCounterMode``'s grad hooks fail on a leaf handed to a submodule (a QAT layer's weight
    to its ``weight_fake_quant``) under ``torch.autograd.grad``; gradients flow through views."""
    return {name: p.view_as(p) for name, p in params.items()}


def _changed_buffers_restored(saved: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Put back buffers a forward pass wrote, whatever the mode (QAT observers update in eval)."""
    with torch.no_grad():
        for buffer, before in saved:
            if buffer.shape != before.shape:
                buffer.resize_(before.shape)
            elif torch.equal(buffer, before):
                continue
            buffer.copy_(before)


def count_flops(model: nn.Module, example: Any, with_backward: bool = False) -> FlopCount:
    """FLOPs of ``model(example)`` (and of its backward with ``with_backward``), batch included.

    Counted on meta copies of the parameters, buffers and input: FLOPs follow from shapes
    alone, and the pass does no arithmetic (a large net's one-sample pass takes seconds on a
    CPU, and a run counts several times). A net the meta pass cannot run (int8 ops have no meta
    kernel; a forward may read its input's values) is counted on its own tensors, as is a net
    with an RNN, whose meta pass would unroll the cells into matmuls the device never runs
    (``by_op`` names the device's kernels). Either way the model is left as it was: eval mode,
    buffers restored, and ``torch.autograd.grad`` touches no ``.grad`` and fires no gradient
    hook (DDP's all-reduce).
    """
    args = as_args(example)
    batch = int(tensors_in(args)[0].shape[0])
    counts = None
    if not any(isinstance(m, nn.RNNBase) for m in model.modules()):
        with contextlib.suppress(Exception):  # an op the meta pass cannot run: real tensors
            counts = _counted_on_meta(model, args, with_backward)
    if counts is None:
        counts = _counted(model, args, with_backward)
    root = type(model).__name__
    forward = _tallied(counts[0], root, batch)
    if not with_backward:
        return forward
    return replace(_tallied(counts[1], root, batch), forward=forward)


Counts = tuple[dict[str, dict[Any, int]], dict[str, dict[Any, int]]]


def _meta(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor of ``tensor``'s shape, dtype and layout on the meta device (no storage)."""
    return torch.empty_like(tensor, device="meta")


def _counted_on_meta(model: nn.Module, args: tuple, with_backward: bool) -> Counts:
    """``_counted``'s counts from a pass over meta copies: the model's own tensors untouched."""
    was_training = model.training
    model.eval()
    with torch.inference_mode(False):
        meta_args = tuple(_meta(a) if isinstance(a, torch.Tensor) else a for a in args)
        params = {n: _meta(p).requires_grad_(p.requires_grad) for n, p in model.named_parameters()}
        buffers = {n: _meta(b) for n, b in model.named_buffers()}
        try:
            return _pass(model, params, buffers, meta_args, with_backward)
        finally:
            model.train(was_training)


def _counted(model: nn.Module, args: tuple, with_backward: bool) -> Counts:
    """The forward counts and, with ``with_backward``, forward and backward counts, from a
    pass over the model's own tensors."""
    was_training = model.training
    model.eval()
    # cuDNN refuses an RNN's backward in eval mode: count RNN backwards through the native
    # kernels, whose gate matmuls are counted the same way.
    has_rnn = any(isinstance(m, nn.RNNBase) for m in model.modules())
    native = torch.backends.cudnn.flags(enabled=not (with_backward and has_rnn))
    # callers may sit in Lightning's validation or test loop, under inference_mode
    with torch.inference_mode(False):
        saved = [(b, b.detach().clone()) for b in model.buffers()]
        # only parameters are differentiated: an input that is itself a leaf needing grad
        # would trip the module tracker's hooks as a parameter does (see _leaf_free)
        args = tuple(
            (a.clone() if a.is_inference() else a).detach() if isinstance(a, torch.Tensor) else a
            for a in args
        )
        params = {n: p for n, p in model.named_parameters()}
        try:
            with native:
                return _pass(model, params, None, args, with_backward)
        finally:
            model.train(was_training)
            _changed_buffers_restored(saved)


def _pass(
    model: nn.Module,
    params: dict[str, torch.Tensor],
    buffers: dict[str, torch.Tensor] | None,
    args: tuple,
    with_backward: bool,
) -> Counts:
    """Count ``model(*args)`` with ``params`` (and ``buffers`` where given) in place of its
    own, and with ``with_backward`` the gradients of its outputs' sum to those that need one.

    Args:
        buffers: the model's buffers to run with; ``None`` runs with its own.
    """
    counter = FlopCounterMode(display=False, custom_mapping=MISSING_RULES)
    trained = {n: p for n, p in params.items() if p.requires_grad}
    with counter, torch.set_grad_enabled(with_backward):
        if buffers is not None or (with_backward and trained):
            state = {**params, **_leaf_free(trained), **(buffers or {})}  # views last: they win
            result = torch.func.functional_call(model, state, args)
        else:
            result = model(*args)
        forward_counts = counter.get_flop_counts()
        outputs = [out for out in tensors_in(result) if out.requires_grad]
        if with_backward and outputs and trained:
            total = sum(out.float().sum() for out in outputs)
            with warnings.catch_warnings():  # int8 ops (dynamic quant) have no
                # backward: the count passes over them, and torch says so per op
                warnings.filterwarnings("ignore", NO_AUTOGRAD_KERNEL, UserWarning)
                torch.autograd.grad(total, list(trained.values()), allow_unused=True)
    return forward_counts, counter.get_flop_counts()


def _tallied(counts: dict[str, dict[Any, int]], root: str, batch: int) -> FlopCount:
    """A :class:`FlopCount` from ``FlopCounterMode.get_flop_counts()`` of a model named ``root``:
    its modules ``Root.child.grandchild`` become hpml's ``child.grandchild`` (the model ``""``)."""
    by_module = {
        name.removeprefix(root).removeprefix("."): int(sum(ops.values()))
        for name, ops in counts.items()
        if name == root or name.startswith(f"{root}.")
    }
    by_op = {str(op): int(n) for op, n in counts.get("Global", {}).items()}
    return FlopCount(sum(by_op.values()), batch, by_module, by_op)
