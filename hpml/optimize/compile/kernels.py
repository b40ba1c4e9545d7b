"""Which convolution kernels a compiled module calls: whether the pre-packed path applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from hpml.optimize.compile.base import as_args

FAST_CONV = "mkldnn::_convolution_pointwise"  # pre-packed oneDNN convolution, pointwise op fused
# these route a convolution to a kernel and run none themselves
DISPATCH_ONLY = frozenset(
    {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution"}
    | {"aten::thnn_conv2d"}
)


def conv_kernels(module: nn.Module, example: Any) -> tuple[str, ...]:
    """The convolution operators one forward of ``module`` on ``example`` calls, as
    ``torch.profiler`` names them (``aten::mkldnn_convolution``...)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(*as_args(example))
    names = {event.key for event in prof.key_averages()}
    return tuple(sorted(n for n in names if "conv" in n and n not in DISPATCH_ONLY))


def fast_path(kernels: Sequence[str]) -> bool:
    """Every convolution runs the pre-packed oneDNN kernel (no eager ``mkldnn_convolution``)."""
    return bool(kernels) and all(k.startswith(FAST_CONV) for k in kernels)
