"""Memory: process and CUDA peaks, and the training breakdown (weights, gradients, optimiser
state, activations saved for backward), each in bytes."""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def peak_rss_bytes() -> int:
    """Largest resident set size this process has reached: on Linux since the last
    :func:`reset_peak_memory` (``VmHWM``), elsewhere since it began (``ru_maxrss``)."""
    try:
        hwm = next(line for line in STATUS.read_text().splitlines() if line.startswith("VmHWM:"))
        return int(hwm.split()[1]) * 1024  # kB
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    """The peak that matters on ``device`` and what it is: CUDA max allocated, or host peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    return peak_rss_bytes(), "process peak RSS"


def reset_peak_memory(device: torch.device) -> None:
    """Start ``device``'s peak afresh from what is held now: CUDA's allocator statistics, or on
    a Linux CPU the process's peak RSS (``clear_refs`` 5), so a sweep's later jobs in the same
    process do not inherit an earlier job's peak. Elsewhere the CPU peak is the process's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):
        CLEAR_REFS.write_text("5")


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of ``tensors``, each storage once: views and shared storages are not doubled."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Tensors an optimiser keeps per parameter (momentum, Adam's moments and step counts)."""
    return [
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]


class SavedActivations(torch.autograd.graph.saved_tensors_hooks):
    """Context manager recording what autograd saves for backward during a forward pass: the
    saved tensors that are not parameters, each storage once, in ``bytes`` after the block."""

    def __init__(self, model: nn.Module) -> None:
        self.exclude = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.saved: dict[int, int] = {}
        super().__init__(self._pack, lambda t: t)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self.exclude:
            self.saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    def __enter__(self) -> SavedActivations:
        super().__enter__()
        return self

    @property
    def bytes(self) -> int:
        return sum(self.saved.values())
