"""What every compile method shares: the :class:`Compiler` contract, its result, and the helpers
the methods call (device sync, one-line refusals, caches)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.errors import IncompatibleError
from hpml.optimize import Named
from hpml.tensors import as_args


@dataclass
class Compiled:
    """What compiling a model measured: the report of :func:`~hpml.optimize.compile.apply_compile`
    (its :class:`~hpml.optimize.Applied`)."""

    method: str
    seconds: float
    max_abs_diff: float
    artifact: Path | None = None
    size_bytes: int | None = None  # of the saved program where it is not a state dict
    # the convolution operators the module calls; (kernels.UNKNOWN,) where they cannot be seen
    conv_kernels: tuple[str, ...] = ()


class Compiler(Named):
    """One compile method, :class:`~hpml.optimize.Named`.

    A new method is a subclass with :meth:`compile`, named by a compile option's
    ``method._target_``; the options it takes are its constructor's.
    """

    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> CompileOutput:
        """``net`` (eval mode) compiled for each of ``examples``, and the file it saved, if
        any; a model it cannot compile is an :class:`~hpml.errors.IncompatibleError`."""
        raise NotImplementedError


CompileOutput = tuple[nn.Module, Path | None]


class Program(nn.Module):
    """An ``nn.Module`` face for a frozen TorchScript module or an exported program's module,
    held outside the module tree: neither supports the ``.train()``/``.eval()`` Lightning calls.
    """

    def __init__(self, program: Any, method: str) -> None:
        super().__init__()
        object.__setattr__(self, "program", program)
        self.method = method

    def forward(self, *args: Any) -> Any:
        return self.program(*args)

    def extra_repr(self) -> str:
        return f"method={self.method}"


def sync(example: Any) -> None:
    tensor = as_args(example)[0]
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)


def run_each(module: Any, examples: Sequence[Any], times: int = 1) -> None:
    """Call ``module`` ``times`` on each example (compiling or specialising per shape)."""
    for example in examples:
        for _ in range(times):
            module(*as_args(example))
        sync(example)


def untraceable(net: nn.Module, method: str, exc: BaseException) -> IncompatibleError:
    text = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
    return IncompatibleError(
        f"{method} cannot compile {type(net).__name__}: {reason} (try another compile= "
        "option, or compile=auto, which leaves out the methods that fail)"
    )


def use_cache_dir(cache: Path) -> None:
    """Point inductor's and triton's on-disk caches at ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")


def max_abs_diff(reference: Any, other: Any) -> float:
    """Largest absolute difference between two outputs (tensors or nested tuples of them)."""
    if isinstance(reference, torch.Tensor):
        if not isinstance(other, torch.Tensor) or other.shape != reference.shape:
            return float("inf")
        return float((reference.float() - other.float()).abs().max()) if reference.numel() else 0.0
    if isinstance(reference, list | tuple):
        if not isinstance(other, list | tuple) or len(other) != len(reference):
            return float("inf")
        return max((max_abs_diff(r, o) for r, o in zip(reference, other, strict=True)), default=0.0)
    return 0.0 if reference == other else float("inf")
