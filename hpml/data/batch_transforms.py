"""Torchvision's per-image transforms as per-batch tensor ops, for images held on a device.

CIFAR-10's and MNIST's pipelines (a random crop of the zero-padded image, a horizontal flip,
``ToTensor``, ``Normalize``) become a few kernels over a whole batch of stored ``uint8`` images,
where the batch lives: the same distribution as the per-image transforms, not the same random
stream. Scaling and standardising are the same operations in the same order as torchvision's,
so an unaugmented batch is bit for bit what the DataLoader path gives. A pipeline with any other
step has no batch form: its data is read through the ``loader`` placement.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F
from torchvision import transforms as T

KNOWN = "RandomCrop (zero padding), RandomHorizontalFlip, ToTensor and Normalize"


@dataclass(frozen=True)
class BatchImages:
    """``uint8`` images N x C x H x W into floats: cropped at random from the image padded by
    ``padding`` zeros on every side (``crop``), flipped left-right with probability ``flip``,
    scaled to [0, 1], then standardised by ``mean`` and ``std`` where given."""

    crop: bool = False
    padding: int = 0
    flip: float = 0.0
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __call__(self, images: Tensor, generator: torch.Generator) -> Tensor:
        if self.crop and self.padding:
            images = random_crop(images, self.padding, generator)
        if self.flip:
            flipped = torch.rand(len(images), generator=generator, device=images.device)
            images = torch.where((flipped < self.flip).view(-1, 1, 1, 1), images.flip(-1), images)
        x = images.to(torch.get_default_dtype()).div(255)  # as ToTensor: float first, then / 255
        if self.mean is not None and self.std is not None:  # as Normalize: minus mean, over std
            mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
            std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
            x = x.sub_(mean).div_(std)
        return x


def random_crop(images: Tensor, padding: int, generator: torch.Generator) -> Tensor:
    """Each image's own random H x W window of it padded by ``padding`` zeros, as
    ``RandomCrop(size, padding)`` takes one: offsets uniform in [0, 2 x padding]."""
    n, channels, height, width = images.shape
    padded = F.pad(images, (padding,) * 4)
    offsets = torch.randint(0, 2 * padding + 1, (2, n), generator=generator, device=images.device)
    rows = (offsets[0, :, None] + torch.arange(height, device=images.device)).view(n, 1, -1, 1)
    cols = (offsets[1, :, None] + torch.arange(width, device=images.device)).view(n, 1, 1, -1)
    samples = torch.arange(n, device=images.device).view(-1, 1, 1, 1)
    planes = torch.arange(channels, device=images.device).view(1, -1, 1, 1)
    return padded[samples, planes, rows, cols]


def batch_images(composed: T.Compose, shape: tuple[int, int, int]) -> BatchImages | str:
    """The batch form of ``composed`` for images of ``shape`` (C x H x W), or why it has none,
    naming the step: only :data:`KNOWN` steps have one, crops of the image's own size."""
    form: dict[str, object] = {}
    for step in composed.transforms:
        name = type(step).__name__
        if isinstance(step, T.RandomCrop):
            size, padding = tuple(step.size), step.padding or 0
            if (
                size != shape[1:]
                or step.padding_mode != "constant"
                or step.fill != 0
                or not isinstance(padding, int)
            ):
                return f"{name} other than an image-sized crop with even zero padding"
            form |= {"crop": True, "padding": padding}
        elif isinstance(step, T.RandomHorizontalFlip):
            form["flip"] = float(step.p)
        elif isinstance(step, T.Normalize):
            form |= {"mean": tuple(map(float, step.mean)), "std": tuple(map(float, step.std))}
        elif not isinstance(step, T.ToTensor):
            return f"{name} has no batch form (those with one: {KNOWN})"
    return BatchImages(**form)  # type: ignore[arg-type]
