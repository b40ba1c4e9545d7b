"""The memory guard of fused arrays: how many members fit the device an array trains on.

One member's footprint is the memory breakdown (:mod:`hpml.analysis.memory`) of a probe training
step of the member as an array runs it (its parameters stacked, vmapped, which saves more than the
plain net:
docs/fused-arrays.md#figures-behind-the-memory-guard). ``fraction`` of the free memory over one
footprint is the array's size; ``fraction`` leaves room for allocator slack and workspaces.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from hpml.analysis.memory import SavedActivations, optimizer_state_tensors, tensor_bytes
from hpml.optimize.fuse.array import FusedNets, member_output

# Saved activations are affine in the batch size, so steps at two small batch sizes give the
# job's batch exactly, for the compute of a few samples rather than of a full batch.
PROBE_BATCHES = (2, 4)
# vmap batches one member differently from several, while 2 and 4 members agree: the probe is a
# 2-member array and a member's share is half of it (docs/fused-arrays.md has the figures).
PROBE_MEMBERS = 2


class ProbedModule(Protocol):
    """What the guard asks of a member, such as :class:`hpml.models.base.HpmlModule` (a
    protocol, so ``optimize`` stays below the models that use it)."""

    net: nn.Module

    def example_input(self, batch_size: int = 1) -> Tensor: ...

    def measure(self, output: Any, batch: tuple[Tensor, Tensor], stage: str) -> dict[str, Any]: ...

    def configure_optimizers(self) -> Any: ...


@dataclass(frozen=True)
class Footprint:
    """One member's training memory in bytes, by part (the memory breakdown's parts)."""

    weights: int
    gradients: int
    optimizer_state: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.activations


def member_footprint(model: ProbedModule, batch_size: int) -> Footprint:
    """The training footprint of ``model`` as one member of a fused array at ``batch_size``,
    from a probe step of copies of ``model`` on the CPU, on zero inputs."""
    probes = nn.ModuleList(copy.deepcopy(model).cpu().train() for _ in range(PROBE_MEMBERS))
    fused = FusedNets([probe.net for probe in probes])
    for probe, net in zip(probes, fused.nets, strict=True):
        probe.net = net  # the net an array trains: its LSTMs in vmappable form
    flat = fused.link()  # its parameters stacked, as an array trains them
    if batch_size <= PROBE_BATCHES[-1]:
        activations, loss = _saved(probes, fused, batch_size)
    else:
        large, _ = _saved(probes, fused, PROBE_BATCHES[1])
        small, loss = _saved(probes, fused, PROBE_BATCHES[0])  # the cheaper backward
        per_sample = (large - small) / (PROBE_BATCHES[1] - PROBE_BATCHES[0])
        activations = small + per_sample * (batch_size - PROBE_BATCHES[0])
    configured = probes[0].configure_optimizers()
    optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
    loss.backward()
    flat.share_grads()
    optimizer.step()  # optimisers such as Adam make their state at the first step
    params = list(probes[0].parameters())
    return Footprint(
        # a member's parameters and gradients are views of the array's stacked ones, whose
        # storage holds every member's: each counts its own elements
        weights=sum(p.nbytes for p in params),
        gradients=sum(p.grad.nbytes for p in params if p.grad is not None),
        optimizer_state=tensor_bytes(optimizer_state_tensors(optimizer)),
        activations=round(activations),
    )


def _saved(probes: nn.ModuleList, fused: FusedNets, batch_size: int) -> tuple[float, Tensor]:
    """One member's share of what autograd saves for a training step of the probe array at
    ``batch_size`` (the vmapped forward and each member's loss, as the memory breakdown records
    them), and the step's loss."""
    x = probes[0].example_input(batch_size)
    y = torch.zeros(batch_size, dtype=torch.long)
    with SavedActivations(probes) as saved:
        output = fused(x)
        losses = [
            probe.measure(member_output(output, index), (x, y), "train")["loss"]
            for index, probe in enumerate(probes)
        ]
    return saved.bytes / len(probes), torch.stack(losses).sum()


def free_bytes(device: torch.device) -> int:
    """Memory the array may take on ``device``: the CUDA device's free memory (what other
    processes hold already taken out), or the host's available memory for the CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def array_capacity(member_bytes: int, free_bytes: int, fraction: float) -> int:
    """Members whose footprints (``member_bytes`` each) fit ``fraction`` of ``free_bytes``; at
    least 1: a job that fits nothing runs on its own, as it would without fusion."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction!r}: expected a share of free memory in (0, 1]")
    return max(1, math.floor(free_bytes * fraction / max(member_bytes, 1)))
