"""``static_int8`` with ``backend=auto``: eager torch.ao where it runs the net (it needs no
compiler), else PT2E (a forward calling an op outside its modules, such as ResNet's residual add).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from hpml.optimize.quant.base import Quantizer
from hpml.optimize.quant.pt2e import PT2EStatic
from hpml.optimize.quant.torch_ao import STATIC_LAYERS, Static, eager_static_problem
from hpml.tensors import as_args


class AutoStatic(Quantizer):
    """Static int8 by the first engine that can run the net: eager ``torch_ao``, then ``pt2e``."""

    name, backend = "static_int8", "auto"
    needs_calibration = float_inputs = True
    supported = STATIC_LAYERS

    def __init__(self, eager: Static, pt2e: PT2EStatic) -> None:
        self.eager, self.pt2e = eager, pt2e

    def check_net(
        self, build_net: Callable[[], nn.Module], example: torch.Tensor, model: str = "the model"
    ) -> None:
        """What the engine chosen for the net (one cached probe) cannot do."""
        self.for_net(build_net(), example).check_net(build_net, example, model)

    def for_net(self, net: nn.Module, example: torch.Tensor) -> Quantizer:
        """The engine that will quantise ``net`` (``example``: one float input batch)."""
        if eager_static_problem(self.eager, net, example) is None:
            return self.eager
        return self.pt2e

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        batches = list(calibration)
        example = as_args(batches[0])[0] if batches else None
        engine = self.pt2e if example is None else self.for_net(net, example)
        quantised = engine.quantize(net, batches)
        self.compile_time_s = engine.compile_time_s
        return quantised
