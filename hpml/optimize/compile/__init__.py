"""Compile a model for inference in plain PyTorch: ``apply_compile(net, method, examples,
workdir)``. One module per method (``torchscript``, ``torch_compile``, ``export``,
``aot_inductor``); ``training.py`` compiles the training step. See README.md.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.errors import ConfigError, IncompatibleError
from hpml.optimize.compile.aot_inductor import AotInductor
from hpml.optimize.compile.base import Compiled, Compiler, as_args, max_abs_diff
from hpml.optimize.compile.export import Export
from hpml.optimize.compile.kernels import (
    DISPATCH_ONLY,
    FAST_CONV,
    UNKNOWN,
    conv_kernels,
    deployed_kernels,
    fast_path,
)
from hpml.optimize.compile.torch_compile import MODES, TorchCompile
from hpml.optimize.compile.torchscript import Torchscript

# ``compile.method`` and ``compile.candidates`` name methods: the classes, by their names
METHODS: dict[str, type[Compiler]] = {
    c.name(): c for c in (Torchscript, TorchCompile, Export, AotInductor)
}

__all__ = [
    "DISPATCH_ONLY",
    "FAST_CONV",
    "METHODS",
    "MODES",
    "UNKNOWN",
    "Compiled",
    "Compiler",
    "apply_compile",
    "compiler",
    "conv_kernels",
    "fast_path",
]


def compiler(method: str, **options: Any) -> Compiler:
    """The method called ``method``, built with those of ``options`` its constructor takes."""
    if method not in METHODS:
        raise ConfigError("method", method, f"one of {', '.join(METHODS)}")
    cls = METHODS[method]
    takes = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in options.items() if k in takes})


def apply_compile(
    net: nn.Module,
    method: Compiler | str,
    examples: Sequence[Any],
    workdir: Path,
    tolerance: float = 1e-3,
) -> Compiled:
    """``net`` (put in eval mode) compiled by ``method`` for each of ``examples`` (inputs of
    each batch size to serve), with what compiling took and how far its outputs are from eager.

    Args:
        method: a :class:`Compiler`, or a method's name (built with its defaults).
        workdir: where the method saves files and keeps its caches.
        tolerance: outputs must match eager within this times the largest eager output, else
            :class:`~hpml.errors.IncompatibleError`.
    """
    method = compiler(method) if isinstance(method, str) else method
    if not examples:
        raise ValueError("apply_compile needs at least one example input")
    net.eval()
    with torch.inference_mode():
        expected = [net(*as_args(e)) for e in examples]
    start = time.perf_counter()
    module, artifact = method.compile(net, examples, workdir)
    seconds = time.perf_counter() - start
    with torch.inference_mode():
        diff = max(
            max_abs_diff(want, module(*as_args(e)))
            for want, e in zip(expected, examples, strict=True)
        )
    scale = max(
        max_abs_diff(torch.zeros_like(w), w) if isinstance(w, torch.Tensor) else 1.0
        for w in expected
    )
    if not diff <= tolerance * max(scale, 1.0):
        raise IncompatibleError(
            f"{method.name()} output of {type(net).__name__} differs from eager by {diff:.3g} "
            f"(tolerance {tolerance:g} x {max(scale, 1.0):.3g}): the model is not traceable as is"
        )
    kernels = deployed_kernels(net, module, examples)
    size = method.size_bytes(module, artifact)
    return Compiled(module, method.name(), seconds, diff, artifact, size, kernels)
