"""hpml's quantisation methods, one function each: the ``_target_`` of a ``conf/quant/`` option.

Each takes the option's knobs (``method`` among them, the name runs record) and returns the
:class:`~hpml.optimize.quant.base.Quantizer` of the backend it picks: ``backend=auto`` takes the
first that has the method, and for ``static_int8`` decides per net
(:mod:`hpml.optimize.quant.auto`). A method knows its own backends; there is no table of methods.
A new quantiser is one class (a ``Quantizer`` subclass, any importable module) or function like
these, plus one ``conf/quant/<name>.yaml`` whose ``quantizer`` node names it::

    quantizer:
      _target_: my_package.MyInt4      # called with the option's other keys: method, bits, ...
      _partial_: true
    method: int4
    bits: 4

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

Backends are imported when chosen: ``torchao`` only where it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable

from hpml.errors import ConfigError
from hpml.optimize.quant.base import Quantizer, flag

__all__ = ["dynamic_int8", "qat", "static_int8", "weight_only_int8"]

Engines = dict[str, Callable[[], Quantizer]]


def own_method(method: str, methods: tuple[str, ...]) -> str:
    """``method`` if it is one of ``methods`` (what this quantiser does), else a ConfigError."""
    if method not in methods:
        raise ConfigError(
            "method",
            method,
            f"{' or '.join(methods)} for this quantiser (another method is another option: "
            "quant=<option>)",
        )
    return method


def pick(method: str, backend: str, engines: Engines) -> Quantizer:
    """The engine of ``backend`` (``auto``: the first of ``engines``), built."""
    if backend == "auto":
        return next(iter(engines.values()))()
    if backend not in engines:
        raise ConfigError(
            "backend", backend, f"auto or a backend that has {method}: {', '.join(engines)}"
        )
    return engines[backend]()


def dynamic_int8(
    method: str = "dynamic_int8",
    backend: str = "auto",
    engine: str = "x86",
    embeddings: bool = True,
) -> Quantizer:
    """Weights int8, activations quantised per call: ``torch_ao`` (Linear, LSTM, GRU; embeddings
    weight-only unless ``embeddings=false``) or ``torchao`` (Linear)."""
    own_method(method, ("dynamic_int8",))
    flag("embeddings", embeddings)

    def eager() -> Quantizer:
        from hpml.optimize.quant.torch_ao import Dynamic

        return Dynamic(engine, embeddings)

    def torchao() -> Quantizer:
        from hpml.optimize.quant.torchao_backend import TorchaoInt8

        return TorchaoInt8(method)

    return pick(method, backend, {"torch_ao": eager, "torchao": torchao})


def static_int8(
    method: str = "static_int8",
    backend: str = "auto",
    engine: str = "x86",
    per_channel: bool = True,
    fuse: bool = True,
    compile: bool = True,
) -> Quantizer:
    """Calibrated int8 weights and activations: eager ``torch_ao`` or the ``pt2e`` graph;
    ``auto`` takes eager where its int8 model runs the net, else PT2E."""
    own_method(method, ("static_int8",))
    for key, value in (("per_channel", per_channel), ("fuse", fuse), ("compile", compile)):
        flag(key, value)

    def eager() -> Quantizer:
        from hpml.optimize.quant.torch_ao import Static

        return Static(engine, per_channel, fuse)

    def pt2e() -> Quantizer:
        from hpml.optimize.quant.pt2e import PT2EStatic

        return PT2EStatic(compile)

    if backend == "auto":
        from hpml.optimize.quant.auto import AutoStatic

        return AutoStatic(eager(), pt2e())  # type: ignore[arg-type]
    return pick(method, backend, {"torch_ao": eager, "pt2e": pt2e})


def qat(
    method: str = "qat",
    backend: str = "auto",
    engine: str = "x86",
    per_channel: bool = True,
    fuse: bool = True,
) -> Quantizer:
    """Quantisation-aware training: fake-quantised fine-tuning, then int8 (``torch_ao``)."""
    own_method(method, ("qat",))
    for key, value in (("per_channel", per_channel), ("fuse", fuse)):
        flag(key, value)

    def eager() -> Quantizer:
        from hpml.optimize.quant.torch_ao import QAT

        return QAT(engine, per_channel, fuse)

    return pick(method, backend, {"torch_ao": eager})


def weight_only_int8(method: str = "weight_only_int8", backend: str = "auto") -> Quantizer:
    """torchao's int8 for Linear layers on CUDA or CPU: weight-only, or with int8 activations
    too where ``method=dynamic_int8`` (``quant=torchao_int8``)."""
    own_method(method, ("weight_only_int8", "dynamic_int8"))

    def torchao() -> Quantizer:
        from hpml.optimize.quant.torchao_backend import TorchaoInt8

        return TorchaoInt8(method)

    return pick(method, backend, {"torchao": torchao})
