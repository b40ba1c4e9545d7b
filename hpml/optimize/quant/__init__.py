"""Quantisation engines behind one interface: ``make_quantizer(method, backend)`` -> Quantizer.

====================  =========================  =========================  ===================
method                ``torch_ao`` (CPU, eager)  ``pt2e`` (x86 CPU, graph)  ``torchao`` (CUDA,
                                                                            CPU)
====================  =========================  =========================  ===================
``dynamic_int8``      Linear, LSTM, GRU;         -                          Linear (int8
                      Embedding weight-only                                 activations and
                                                                            weights)
``static_int8``       Conv, Linear in modules;   Conv, Linear and the ops   -
                      fused, per-channel,        between them (residual
                      calibrated                 add); calibrated, compiled
``qat``               Conv, Linear; fake-quant   -                          -
                      fine-tune, then convert
``weight_only_int8``  -                          -                          Linear (int8
                                                                            weights)
====================  =========================  =========================  ===================

``backend=auto`` picks the first backend in that order that has the method; for ``static_int8``
it is decided per net (:mod:`hpml.optimize.quant.auto`): eager where eager int8 runs the net,
else ``pt2e``.
"""

from __future__ import annotations

from hpml.errors import ConfigError
from hpml.optimize.quant.base import OnDevice, Quantizer, notice_once

METHODS = ("dynamic_int8", "static_int8", "qat", "weight_only_int8")
BACKENDS = {
    "torch_ao": ("dynamic_int8", "static_int8", "qat"),
    "pt2e": ("static_int8",),
    "torchao": ("dynamic_int8", "weight_only_int8"),
}

__all__ = ["BACKENDS", "METHODS", "OnDevice", "Quantizer", "make_quantizer", "notice_once"]


def resolve_backend(method: str, backend: str = "auto") -> str:
    if method not in METHODS:
        raise ConfigError("method", method, f"one of {', '.join(METHODS)}")
    if backend == "auto":
        return next(name for name, methods in BACKENDS.items() if method in methods)
    if backend not in BACKENDS:
        raise ConfigError("backend", backend, f"one of auto, {', '.join(BACKENDS)}")
    if method not in BACKENDS[backend]:
        able = [name for name, methods in BACKENDS.items() if method in methods]
        raise ConfigError("backend", backend, f"a backend that has {method}: {', '.join(able)}")
    return backend


def make_quantizer(
    method: str,
    backend: str = "auto",
    engine: str = "x86",
    per_channel: bool = True,
    fuse: bool = True,
    embeddings: bool = True,
    compile: bool = True,
) -> Quantizer:
    """The engine for ``method`` on ``backend``; options a backend does not use are ignored."""
    if method == "static_int8" and backend == "auto":
        from hpml.optimize.quant import torch_ao
        from hpml.optimize.quant.auto import AutoStatic
        from hpml.optimize.quant.pt2e import PT2EStatic

        return AutoStatic(torch_ao.Static(engine, per_channel, fuse), PT2EStatic(compile))
    backend = resolve_backend(method, backend)
    if backend == "pt2e":
        from hpml.optimize.quant.pt2e import PT2EStatic

        return PT2EStatic(compile)
    if backend == "torchao":
        from hpml.optimize.quant.torchao_backend import TorchaoInt8

        return TorchaoInt8(method)
    from hpml.optimize.quant import torch_ao

    if method == "dynamic_int8":
        return torch_ao.Dynamic(engine, embeddings)
    if method == "static_int8":
        return torch_ao.Static(engine, per_channel, fuse)
    return torch_ao.QAT(engine, per_channel, fuse)
