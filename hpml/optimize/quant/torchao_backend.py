"""Backend ``torchao``: ``torchao.quantization.quantize_`` on ``nn.Linear`` layers, CUDA and CPU:
weight-only int8 (``weight_only_int8``) or int8 activations too (``dynamic_int8``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from torch import nn

from hpml.errors import HpmlError
from hpml.optimize.quant.base import Quantizer


class BackendMissingError(HpmlError):
    """The selected backend's package is not installed."""


def load_torchao() -> Any:
    try:
        return importlib.import_module("torchao.quantization")
    except ImportError as exc:
        raise BackendMissingError(
            f"quant.method.backend=torchao needs the torchao package ({exc.msg}): "
            "pip install 'torchao==0.18.*', or use quant.method.backend=torch_ao"
        ) from None


class TorchaoInt8(Quantizer):
    backend = "torchao"
    cuda_capable = True
    supported = (nn.Linear,)

    def __init__(self, method: str) -> None:
        self.name = method
        load_torchao()  # fail when the config is built, not after training

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        tq = load_torchao()
        config = (
            tq.Int8WeightOnlyConfig()
            if self.name == "weight_only_int8"
            else tq.Int8DynamicActivationInt8WeightConfig()
        )
        tq.quantize_(net.eval(), config)
        return net
