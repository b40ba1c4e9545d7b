"""Where a run's samples live while it reads them, and what a loader needs to keep up.

``data.placement`` is one knob of every dataset:

- ``device``: the split's tensors on the training device, each epoch's batches gathered there in
  an order drawn once per epoch; no loader, no copy per step;
- ``pinned``: the split's tensors in pinned host memory, each batch gathered there and copied
  ``non_blocking`` (CUDA only);
- ``loader``: a DataLoader over the samples, for data decoded one sample at a time (JPEG
  folders), with workers, pinned batches and prefetching on a GPU trainer;
- ``auto``: ``device`` for data held in memory on a GPU trainer, and on the CPU
  :data:`CPU_CHOICE` (a bench case measured both: docs/metrics.md); ``loader`` where the data
  is read per sample or a loader knob asks for one (``num_workers`` above 0, ``pin_memory``).

Each epoch's order is the one the ``loader`` placement's DataLoader draws from the same seed
(:func:`epoch_orders`), so without augmentation every placement gives the same batches, bit for
bit, and a study's accuracy does not depend on where its samples lived.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader

PLACEMENTS = ("auto", "device", "pinned", "loader")
IN_MEMORY = ("device", "pinned")  # the placements that hold a split as tensors
CPU_CHOICE = "device"  # what auto picks on a CPU trainer for data held in memory
MAX_AUTO_WORKERS = 8  # most workers num_workers=auto starts per device

# a batch of stored inputs -> the model's, on the batch's device; its random draws (crops,
# flips) from the generator given, None for a split that is not augmented
BatchTransform = Callable[[Tensor, torch.Generator], Tensor]


@dataclass(frozen=True)
class Tensors:
    """A split held as tensors: ``inputs`` (N x ...), ``targets`` (N), and the ``transform``
    (None: none) that turns a batch of stored inputs into what the model takes."""

    inputs: Tensor
    targets: Tensor
    transform: BatchTransform | None = None

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def head(self, count: int | None) -> Tensors:
        """The first ``count`` samples (all for None), as ``data.limit`` cuts a split."""
        if count is None or count >= len(self):
            return self
        return replace(self, inputs=self.inputs[:count], targets=self.targets[:count])

    def to(self, device: torch.device, pinned: bool = False) -> Tensors:
        """These tensors on ``device``, or in pinned host memory."""
        if pinned:
            return replace(self, inputs=self.inputs.pin_memory(), targets=self.targets.pin_memory())
        return replace(self, inputs=self.inputs.to(device), targets=self.targets.to(device))


@dataclass(frozen=True)
class Loading:
    """What a data module chose for a run: where its samples live and the loader's knobs
    (used by the ``loader`` placement only), logged as the run's ``data.chosen.*`` params."""

    placement: str
    num_workers: int
    pin_memory: bool
    prefetch_factor: int

    def params(self) -> dict[str, Any]:
        chosen = {"placement": self.placement}
        if self.placement == "loader":
            chosen |= {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
            if self.num_workers:
                chosen["prefetch_factor"] = self.prefetch_factor
        return {f"data.chosen.{key}": value for key, value in chosen.items()}


def available_cpus() -> int:
    """The cores this process may run on (a cluster's allocation, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_workers(device: torch.device, cpus: int, devices: int) -> int:
    """``num_workers=auto``: on a GPU trainer, the cores each device's process has, less the one
    its training loop runs on, at least 1 and at most :data:`MAX_AUTO_WORKERS`; on a CPU none,
    as workers would take cores from the training's own threads."""
    if device.type != "cuda":
        return 0
    return max(1, min(MAX_AUTO_WORKERS, cpus // max(devices, 1) - 1))


def choose(
    placement: str,
    num_workers: int | str,
    pin_memory: bool | str,
    prefetch_factor: int,
    in_memory: bool,
    device: torch.device,
    devices: int = 1,
    cpus: int | None = None,
) -> Loading:
    """The placement and loader knobs a run uses, ``auto`` values resolved for ``device``.

    Args:
        in_memory: whether the data can be held as tensors (not decoded per sample).
        devices: the devices this node's processes train on: auto workers share its cores.
        cpus: the cores this process may use (None: :func:`available_cpus`).
    """
    wants_loader = (num_workers != "auto" and int(num_workers) > 0) or pin_memory is True
    if placement == "auto":
        held = CPU_CHOICE if device.type == "cpu" else "device" if device.type == "cuda" else None
        placement = held if in_memory and held and not wants_loader else "loader"
    workers = (
        auto_workers(device, cpus or available_cpus(), devices)
        if num_workers == "auto"
        else int(num_workers)
    )
    pin = device.type == "cuda" if pin_memory == "auto" else bool(pin_memory)
    return Loading(placement, workers, pin, prefetch_factor)


def epoch_orders(size: int, batch_size: int, seed: int) -> Iterator[Tensor]:
    """Each epoch's order of ``size`` samples, drawn as the ``loader`` placement's DataLoader
    draws it (its sampler and its per-epoch seed, from one generator seeded with ``seed``), so
    both placements read the same batches in the same order."""
    indices = DataLoader(
        range(size),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    while True:
        yield torch.cat(list(indices))


def shard(order: Tensor, rank: int, world: int) -> Tensor:
    """Rank ``rank``'s share of ``order`` under DDP, padded with its first samples to a multiple
    of ``world`` as Lightning's DistributedSampler pads, so every rank steps alike."""
    if world == 1:
        return order
    total = math.ceil(len(order) / world) * world
    padded = order.repeat(math.ceil(total / len(order)))[:total]
    return padded[rank::world]


class DeviceBatches:
    """Batches of a split held as :class:`Tensors`, for the ``device`` and ``pinned``
    placements: an iterable Lightning's loops take as they take a DataLoader.

    Each epoch's order is copied to where the tensors are once; a batch is one gather of
    inputs and one of targets there (pinned: into pinned memory, then one ``non_blocking``
    copy to ``device``), then the split's transform, on ``device``.

    Args:
        shuffle: a new order each epoch (:func:`epoch_orders`); else the stored order.
        rank: this process's rank, of ``world`` DDP processes, for its :func:`shard`.
        seed: the seed of the orders and of the transform's random draws.
    """

    def __init__(
        self,
        tensors: Tensors,
        batch_size: int,
        device: torch.device,
        shuffle: bool,
        pinned: bool = False,
        rank: int = 0,
        world: int = 1,
        seed: int = 0,
    ) -> None:
        self.tensors = tensors.to(device, pinned)
        self.batch_size, self.device, self.pinned = batch_size, device, pinned
        self.rank, self.world = rank, world
        self.orders = epoch_orders(len(tensors), batch_size, seed) if shuffle else None
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __len__(self) -> int:
        return math.ceil(math.ceil(len(self.tensors) / self.world) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order = next(self.orders) if self.orders is not None else torch.arange(len(self.tensors))
        order = shard(order, self.rank, self.world).to(self.tensors.inputs.device)
        for start in range(0, len(order), self.batch_size):
            yield self._batch(order[start : start + self.batch_size])

    def _batch(self, index: Tensor) -> tuple[Tensor, Tensor]:
        inputs, targets = self.tensors.inputs, self.tensors.targets
        if self.pinned:
            x = torch.empty((len(index), *inputs.shape[1:]), dtype=inputs.dtype, pin_memory=True)
            y = torch.empty(len(index), dtype=targets.dtype, pin_memory=True)
            torch.index_select(inputs, 0, index, out=x)
            torch.index_select(targets, 0, index, out=y)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        else:
            x, y = inputs.index_select(0, index), targets.index_select(0, index)
        if self.tensors.transform is not None:
            x = self.tensors.transform(x, self.generator)
        return x, y
