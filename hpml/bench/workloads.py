"""The models ``train_speed`` and ``prune`` time, and at what size, on which device.

VGG11 in its CIFAR layout (32 px) is the small case: a GPU runs its step in a few milliseconds,
bound by kernel launches, which is where compiling away Python and launch overhead (CUDA graphs)
shows and where arithmetic savings (mixed precision, pruned channels) cannot. On a GPU the cases
also time what the device is for, as study 2 runs it: VGG16 in its ImageNet layout at 224 px,
batch 64, bound by arithmetic. A CPU times the small case alone (VGG16 at 224 px is far too slow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hpml.models.nets.vgg import vgg


@dataclass(frozen=True)
class Workload:
    """A VGG as :func:`hpml.models.nets.vgg.vgg` builds it, on ``batch`` random images."""

    name: str
    depth: int
    layout: str
    image_size: int
    num_classes: int
    batch_norm: bool
    batch: int

    @property
    def label(self) -> str:
        """``VGG16-ImageNet 224px b64``: what a ratio's name says it timed."""
        return f"{self.name} {self.image_size}px b{self.batch}"

    def net(self) -> nn.Module:
        return vgg(self.depth, self.num_classes, self.layout, self.batch_norm)

    def images(self) -> torch.Tensor:
        return torch.randn(self.batch, 3, self.image_size, self.image_size)

    def labels(self) -> torch.Tensor:
        return torch.randint(0, self.num_classes, (self.batch,))


def vgg11_cifar(batch: int) -> Workload:
    """VGG11-CIFAR with batch norm (hpml's default model)."""
    return Workload("VGG11-CIFAR", 11, "cifar", 32, 10, True, batch)


# study 2's VGG16 (conf/model/vgg16_imagenet.yaml, experiment=batch_scaling at its largest batch)
VGG16_IMAGENET = Workload("VGG16-ImageNet", 16, "imagenet", 224, 1000, False, 64)
