"""The one interface every quantisation backend implements, and helpers they share.

A ``Quantizer`` says how (which layers, which kernels, which device they run on); a callback
decides when.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from hpml.errors import ConfigError, IncompatibleError
from hpml.optimize import Named
from hpml.tensors import first_tensor


class Quantizer(ABC, Named):
    """Turns a float ``nn.Module`` into a quantised one.

    Post-training methods: ``quantize`` (with ``calibration`` batches where
    ``needs_calibration``). QAT: ``prepare_qat``, train, then ``convert``. Before training,
    ``check``, ``check_inputs`` and ``check_net`` say what it cannot do to the net.
    ``cuda_capable``: the quantised kernels run on CUDA; where not, callers evaluate on CPU.
    """

    backend: str
    needs_calibration: bool = False
    float_inputs: bool = False  # it quantises activations: inputs must be floats, not ids
    trains: bool = False
    cuda_capable: bool = False
    supported: tuple[type[nn.Module], ...] = ()
    compile_time_s: float | None = None  # seconds the last quantize spent compiling, if any

    def check(self, net: nn.Module) -> None:
        """Raise ``IncompatibleError`` (one line) when ``net`` has no layer this method handles."""
        if not any(isinstance(m, self.supported) for m in net.modules()):
            names = ", ".join(t.__name__ for t in self.supported)
            raise IncompatibleError(
                f"quant={self.name} ({self.backend}) quantises {names} layers, and "
                f"{type(net).__name__} has none; choose another quant method"
            )

    def check_inputs(self, net: nn.Module, example: Any) -> None:
        """Raise ``IncompatibleError`` when inputs like ``example`` cannot be quantised: ids
        where the method quantises activations (``float_inputs``)."""
        tensor = first_tensor(example)
        if self.float_inputs and tensor is not None and not tensor.is_floating_point():
            raise IncompatibleError(
                f"quant={self.name} quantises the activations that {type(net).__name__} "
                f"computes from its inputs, but they are {tensor.dtype} ids (an embedding "
                "model): use quant=dynamic_int8"
            )

    def check_net(
        self, build_net: Callable[[], nn.Module], example: torch.Tensor, model: str = "the model"
    ) -> None:
        """Raise a one-line ``HpmlError`` when this quantiser cannot run the CPU net
        ``build_net()`` builds (built only when asked) on inputs like ``example``; ``model`` names
        it in the message."""
        return None

    def for_net(self, net: nn.Module, example: torch.Tensor) -> Quantizer:
        """The engine that quantises ``net``: this one, unless a backend is chosen per net."""
        return self

    @abstractmethod
    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        """The quantised model (``net`` may be modified in place and returned)."""

    def prepare_qat(self, net: nn.Module) -> nn.Module:
        raise NotImplementedError(f"{self.name} is not trained")

    def convert(self, net: nn.Module) -> nn.Module:
        raise NotImplementedError(f"{self.name} is not trained")


def no_calibration() -> ConfigError:
    """What a calibrated method says when it is given no batches."""
    return ConfigError(
        "calibration_batches",
        0,
        "a positive integer: static int8 calibrates activation ranges on that many training "
        "batches",
    )


def to_device(value: Any, device: torch.device, float32: bool = False) -> Any:
    """``value``'s tensors, nested or not, on ``device``; floats as float32 if ``float32``."""

    def move(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        leaf = leaf.to(device)
        return leaf.float() if float32 and leaf.is_floating_point() else leaf

    return tree_map(move, value)


class OnDevice(nn.Module):
    """Runs ``module`` on ``device`` (floats as float32, autocast off) whatever device its
    caller's tensors are on, outputs back on the caller's; ``.to()`` on a parent leaves it there,
    so a CPU-only quantised model stays on CPU inside a module a GPU trainer moves around.
    """

    def __init__(self, module: nn.Module, device: torch.device | str) -> None:
        super().__init__()
        self.module = module
        self.run_device = torch.device(device)

    def _apply(self, fn: Any, recurse: bool = True) -> OnDevice:
        return self

    def forward(self, *args: Any) -> Any:
        tensor = first_tensor(args)
        caller = tensor.device if tensor is not None else self.run_device
        with (
            torch.autocast(caller.type, enabled=False),
            torch.autocast(self.run_device.type, enabled=False),
        ):
            out = self.module(*to_device(args, self.run_device, float32=True))
        return to_device(out, caller)
