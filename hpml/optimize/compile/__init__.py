"""Compile a model for inference in plain PyTorch: ``apply_compile(net, method, examples,
workdir)``. One module per method, each a :class:`Compiler` (``eager``, ``torchscript``,
``torch_compile``, ``export``, ``aot_inductor``), named by a config's ``_target_``;
``training.py`` compiles the training step. See README.md.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.errors import ConfigError, IncompatibleError
from hpml.optimize import Applied
from hpml.optimize.compile.base import Compiled, Compiler, max_abs_diff
from hpml.optimize.compile.kernels import (
    DISPATCH_ONLY,
    FAST_CONV,
    UNKNOWN,
    conv_kernels,
    deployed_kernels,
    fast_path,
)
from hpml.tensors import as_args

# a method, as its config's `_target_` gives it: the class, or a partial of it
Method = Callable[..., Compiler]

__all__ = [
    "DISPATCH_ONLY",
    "FAST_CONV",
    "UNKNOWN",
    "Compiled",
    "Compiler",
    "Method",
    "apply_compile",
    "compiler",
    "conv_kernels",
    "fast_path",
    "knobs",
    "method_class",
]


def method_class(method: Method) -> type[Compiler]:
    """The :class:`Compiler` class ``method`` builds (its name is the method's)."""
    cls = method.func if isinstance(method, functools.partial) else method
    if not (isinstance(cls, type) and issubclass(cls, Compiler)):
        raise ConfigError(
            "method",
            getattr(cls, "__qualname__", repr(cls)),
            "a Compiler class as `_target_` (hpml/optimize/compile/)",
        )
    return cls


def knobs(method: Method) -> set[str]:
    """The knobs ``method`` takes: its constructor's parameters."""
    return set(inspect.signature(method_class(method)).parameters)


def compiler(method: Method, **options: Any) -> Compiler:
    """``method`` built with those of ``options`` its constructor takes, except those its
    partial already sets (a knob written on the ``method:`` node itself)."""
    takes = knobs(method)
    given = method.keywords if isinstance(method, functools.partial) else {}
    return method(**{k: v for k, v in options.items() if k in takes and k not in given})


def apply_compile(
    net: nn.Module,
    method: Compiler,
    examples: Sequence[Any],
    workdir: Path,
    tolerance: float = 1e-3,
) -> Applied[Compiled]:
    """``net`` (put in eval mode) compiled by ``method`` for each of ``examples`` (inputs of
    each batch size to serve), reporting what compiling took and how far its outputs are from
    eager.

    Args:
        workdir: where the method saves files and keeps its caches.
        tolerance: outputs must match eager within this times the largest eager output, else
            :class:`~hpml.errors.IncompatibleError`.
    """
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
            f"{method.name} output of {type(net).__name__} differs from eager by {diff:.3g} "
            f"(tolerance {tolerance:g} x {max(scale, 1.0):.3g}): the model is not traceable as is"
        )
    kernels = deployed_kernels(net, module, examples)
    size = None if artifact is None else artifact.stat().st_size  # else the state dict's
    return Applied(module, Compiled(method.name, seconds, diff, artifact, size, kernels))
