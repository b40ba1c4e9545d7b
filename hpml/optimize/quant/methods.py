"""hpml's quantisation methods, one function each: the ``_target_`` of a ``conf/quant/`` option's
``method:`` node, whose name is the method's (written once: ``weight_only_int8`` serves two, its
``activations`` knob choosing ``dynamic_int8``).

Each takes the option's knobs and returns the :class:`~hpml.optimize.quant.base.Quantizer` of the
backend it picks (``auto``: the first that has the method; for ``static_int8``, per net).
"""

from __future__ import annotations

from collections.abc import Callable

from hpml.errors import ConfigError
from hpml.optimize.quant import torch_ao
from hpml.optimize.quant.base import Quantizer

Engines = dict[str, Callable[[], Quantizer]]


def flags(**values: bool) -> None:
    """A ConfigError for the first of ``values`` that is not true or false."""
    for key, value in values.items():
        if not isinstance(value, bool):
            raise ConfigError(key, value, "true or false")


def pick(method: str, backend: str, engines: Engines) -> Quantizer:
    """The engine of ``backend`` (``auto``: the first of ``engines``), built."""
    if backend == "auto":
        return next(iter(engines.values()))()
    if backend not in engines:
        raise ConfigError(
            "backend", backend, f"auto or a backend that has {method}: {', '.join(engines)}"
        )
    return engines[backend]()


def dynamic_int8(backend: str = "auto", engine: str = "x86", embeddings: bool = True) -> Quantizer:
    """Weights int8, activations quantised per call: ``torch_ao`` (Linear, LSTM, GRU; embeddings
    weight-only unless ``embeddings=false``) or ``torchao`` (Linear)."""
    flags(embeddings=embeddings)
    engines = {
        "torch_ao": lambda: torch_ao.Dynamic(engine, embeddings),
        "torchao": lambda: _torchao("dynamic_int8"),
    }
    return pick("dynamic_int8", backend, engines)


def static_int8(
    backend: str = "auto",
    engine: str = "x86",
    per_channel: bool = True,
    fuse: bool = True,
    compile: bool = True,
) -> Quantizer:
    """Calibrated int8 weights and activations: eager ``torch_ao`` or the ``pt2e`` graph;
    ``auto`` takes eager where its int8 model runs the net, else PT2E."""
    flags(per_channel=per_channel, fuse=fuse, compile=compile)

    from hpml.optimize.quant.auto import AutoStatic
    from hpml.optimize.quant.pt2e import PT2EStatic

    eager = torch_ao.Static(engine, per_channel, fuse)
    if backend == "auto":
        return AutoStatic(eager, PT2EStatic(compile))
    engines = {"torch_ao": lambda: eager, "pt2e": lambda: PT2EStatic(compile)}
    return pick("static_int8", backend, engines)


def qat(
    backend: str = "auto", engine: str = "x86", per_channel: bool = True, fuse: bool = True
) -> Quantizer:
    """Quantisation-aware training: fake-quantised fine-tuning, then int8 (``torch_ao``)."""
    flags(per_channel=per_channel, fuse=fuse)
    return pick("qat", backend, {"torch_ao": lambda: torch_ao.QAT(engine, per_channel, fuse)})


def weight_only_int8(activations: bool = False, backend: str = "torchao") -> Quantizer:
    """torchao's int8 for Linear layers on CUDA or CPU: weight-only, or with int8 activations
    too where ``activations`` (the method ``dynamic_int8``; ``quant=torchao_int8``)."""
    flags(activations=activations)
    method = "dynamic_int8" if activations else "weight_only_int8"
    return pick(method, backend, {"torchao": lambda: _torchao(method)})


def _torchao(method: str) -> Quantizer:
    """torchao's engine, importing torchao only where it is chosen."""
    from hpml.optimize.quant.torchao_backend import TorchaoInt8

    return TorchaoInt8(method)
