"""Classifiers of images (VGG, ResNet, AlexNet) and of token sequences (LSTM sentiment)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from hpml.data.spec import DataSpec
from hpml.errors import IncompatibleError
from hpml.models.base import HpmlModule, Measured
from hpml.models.input_fit import CANDIDATES, MAX_SIZE, probe, size_range, sizes_text


class Classifier(HpmlModule):
    """Cross-entropy classifier; logs ``<stage>/loss`` and ``<stage>/acc`` (top-1) per epoch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.criterion = nn.CrossEntropyLoss()
        self.accuracy = nn.ModuleDict(
            {
                f"{stage}_acc": MulticlassAccuracy(self.data_spec.num_classes, average="micro")
                for stage in ("train", "val", "test")
            }
        )

    def measure(self, output: Tensor, batch: tuple[Tensor, Tensor], stage: str) -> Measured:
        _, y = batch
        accuracy = self.accuracy[f"{stage}_acc"]
        accuracy.update(output, y)  # its epoch value is what is logged: no batch value
        return {"loss": self.criterion(output, y), "acc": accuracy}


def check_input_fits(net: Callable[..., nn.Module], data: DataSpec) -> None:
    """Fail early, naming the image sizes that work, when ``net`` cannot take the data's
    images (on the meta device: no memory, no compute)."""
    name = getattr(net, "func", net).__name__
    channels, height, width = data.input_shape
    size = min(height, width)
    with torch.device("meta"):
        probe_net = net(num_classes=data.num_classes)
    if probe(probe_net, channels, size).runs:
        return
    sizes = size_range(lambda s: probe(probe_net, channels, s).runs)
    if sizes is None:
        raise IncompatibleError(
            f"model {name} does not run on {channels}-channel images of any size from "
            f"{CANDIDATES[0]}x{CANDIDATES[0]} to {MAX_SIZE}x{MAX_SIZE}; give it data with the "
            f"channel count it was built for"
        )
    if size < sizes[0]:
        raise IncompatibleError(
            f"input {height}x{width} is too small for {name}: it needs at least "
            f"{sizes[0]}x{sizes[0]} pixels; use 224x224 images (data.image_size=224 for synthetic "
            f"data, or data=imagenet)"
        )
    raise IncompatibleError(
        f"input {height}x{width} does not fit {name}: it runs on {sizes_text(sizes)} images; "
        f"use images of that size (data.image_size=... where the data has that option)"
    )


class ImageClassifier(Classifier):
    """Image classification; ``net`` is completed with ``num_classes`` from the data."""

    modality = "image"

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        check_input_fits(net, data)
        return net(num_classes=data.num_classes)


class TextClassifier(Classifier):
    """Sequence classification; ``net`` is completed with ``vocab_size`` and ``num_classes``."""

    modality = "tokens"

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        return net(vocab_size=data.vocab_size, num_classes=data.num_classes)
