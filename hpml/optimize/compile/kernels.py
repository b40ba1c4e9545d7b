"""Which convolution kernels a compiled module calls: whether the pre-packed path applied."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from hpml.tensors import as_args

FAST_CONV = "mkldnn::_convolution_pointwise"  # pre-packed oneDNN convolution, pointwise op fused
# these route a convolution to a kernel and run none themselves
DISPATCH_ONLY = frozenset(
    {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution"}
    | {"aten::thnn_conv2d"}
)
# a compiled module whose eager net convolves, where no convolution can be seen being called
UNKNOWN = "unknown"


def conv_kernels(module: nn.Module, example: Any) -> tuple[str, ...]:
    """The convolution operators one forward of ``module`` on ``example`` calls, as
    ``torch.profiler`` names them (``aten::mkldnn_convolution``...); for a TorchScript program
    (a ``ScriptModule``, or a :class:`~hpml.optimize.compile.base.Program` holding one), also its
    graph's convolution nodes, which run as JIT operators the profiler does not record
    (``prim::mkldnn_convolution``, what ``optimize_for_inference`` puts in on CPU)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(*as_args(example))
    names = {event.key for event in prof.key_averages()}
    program = getattr(module, "program", module)
    if isinstance(program, torch.jit.ScriptModule):
        names |= set(_node_kinds(program.graph))
    return tuple(sorted(n for n in names if "conv" in n and n not in DISPATCH_ONLY))


def _node_kinds(block: Any) -> Iterator[str]:
    """The operator of every node of a TorchScript graph or block, nested blocks included."""
    for node in block.nodes():
        yield node.kind()
        for inner in node.blocks():
            yield from _node_kinds(inner)


def deployed_kernels(net: nn.Module, module: nn.Module, examples: Sequence[Any]) -> tuple[str, ...]:
    """:func:`conv_kernels` of ``module`` (``net`` compiled) on the last example, or
    ``(UNKNOWN,)`` where it shows none but ``net`` calls convolutions on the first: the compiled
    code runs them where the profiler cannot see (an AOTInductor library, say)."""
    kernels = conv_kernels(module, examples[-1])
    if not kernels and conv_kernels(net, examples[0]):
        return (UNKNOWN,)
    return kernels


def fast_path(kernels: Sequence[str]) -> bool:
    """Every convolution runs the pre-packed oneDNN kernel (no eager ``mkldnn_convolution``)."""
    return bool(kernels) and all(k.startswith(FAST_CONV) for k in kernels)
