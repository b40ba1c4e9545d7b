"""Quantisation in plain PyTorch (no Lightning, no Hydra): ``apply_quant(net, quantizer,
calibration)`` with a :class:`Quantizer` that a method of :mod:`hpml.optimize.quant.methods`
builds. See README.md for the modules and how to add a quantiser.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import nn

from hpml.optimize import Applied
from hpml.optimize.quant.base import OnDevice, Quantizer

__all__ = ["OnDevice", "Quantizer", "apply_quant"]


def apply_quant(
    net: nn.Module, quantizer: Quantizer, calibration: Iterable[Any] = ()
) -> Applied[float | None]:
    """``net`` quantised after training (perhaps in place), reporting the seconds the quantiser
    spent compiling its kernels (None where it compiles nothing).

    Args:
        quantizer: e.g. ``methods.static_int8(backend="pt2e")``; a QAT one converts the ``net`` it
            prepared.
        calibration: input batches, for a quantiser that ``needs_calibration``.
    """
    module = quantizer.convert(net) if quantizer.trains else quantizer.quantize(net, calibration)
    return Applied(module, quantizer.compile_time_s)
