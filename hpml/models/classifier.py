"""Classifiers of images (VGG, ResNet, AlexNet) and of token sequences (LSTM sentiment)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from hpml.data.spec import DataSpec
from hpml.errors import IncompatibleError
from hpml.models.base import HpmlModule

STAGES = ("train", "val", "test")
MAX_PROBE_SIZE = 1024


class Classifier(HpmlModule):
    """Cross-entropy classifier; logs ``<stage>/loss`` and ``<stage>/acc`` (top-1) per epoch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.criterion = nn.CrossEntropyLoss()
        self.accuracy = nn.ModuleDict({
            f"{stage}_acc": MulticlassAccuracy(self.data_spec.num_classes, average="micro")
            for stage in STAGES
        })

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        logits = self(x)
        loss = self.criterion(logits, y)
        accuracy = self.accuracy[f"{stage}_acc"]
        accuracy(logits, y)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=True)
        return loss


def _fits(net: nn.Module, channels: int, size: int) -> bool:
    try:
        net(torch.empty(1, channels, size, size, device="meta"))
    except RuntimeError:
        return False
    return True


def check_input_fits(net: Callable[..., nn.Module], data: DataSpec, name: str) -> None:
    """Fail early, naming the smallest input that works, when images are too small for ``net``.

    Runs on the meta device: no memory, no compute, milliseconds even for VGG16 at 224x224.
    """
    channels, height, width = data.input_shape
    with torch.device("meta"):
        probe = net(num_classes=data.num_classes).eval()
    if _fits(probe, channels, min(height, width)):
        return
    low, high = min(height, width), MAX_PROBE_SIZE
    if not _fits(probe, channels, high):
        raise IncompatibleError(f"model {name} does not run on {channels}-channel images")
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _fits(probe, channels, mid) else (mid, high)
    raise IncompatibleError(
        f"input {height}x{width} is too small for {name}: it needs at least {high}x{high} pixels; "
        f"use 224x224 images (data.image_size=224 for synthetic data, or data=imagenet)")


class ImageClassifier(Classifier):
    """Image classification; ``net`` is completed with ``num_classes`` from the data."""

    modality = "image"

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        name = getattr(net, "func", net).__name__
        check_input_fits(net, data, name)
        return net(num_classes=data.num_classes)


class TextClassifier(Classifier):
    """Sequence classification; ``net`` is completed with ``vocab_size`` and ``num_classes``."""

    modality = "tokens"

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        return net(vocab_size=data.vocab_size, num_classes=data.num_classes)
