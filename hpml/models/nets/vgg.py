"""VGG in the layouts the studies use: CIFAR (32x32, pytorch-cifar) and ImageNet (torchvision)."""

from __future__ import annotations

import torchvision
from torch import Tensor, nn
from torchvision.models.vgg import cfgs

from hpml.errors import ConfigError

# Output channels per conv layer, "M" for a 2x2 max pool (Simonyan & Zisserman, configs A, B, D, E):
# torchvision's table, which its ImageNet layout builds from too.
CONFIGS: dict[int, list[int | str]] = {11: cfgs["A"], 13: cfgs["B"], 16: cfgs["D"], 19: cfgs["E"]}
LAYOUTS = ("cifar", "imagenet")


class CifarVGG(nn.Module):
    """VGG for 32x32 inputs as in the widely used pytorch-cifar code: conv-BN-ReLU, one Linear
    after five poolings bring 32x32 down to 1x1."""

    def __init__(self, depth: int = 11, num_classes: int = 10, batch_norm: bool = True) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for width in CONFIGS[depth]:
            if width == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                continue
            layers.append(nn.Conv2d(channels, int(width), kernel_size=3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(int(width)))
            layers.append(nn.ReLU(inplace=True))
            channels = int(width)
        layers.append(nn.AvgPool2d(kernel_size=1, stride=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x).flatten(1))


def vgg(
    depth: int = 11, num_classes: int = 10, layout: str = "cifar", batch_norm: bool = True
) -> nn.Module:
    """Build VGG-``depth`` in the ``cifar`` or ``imagenet`` (torchvision, 224x224) layout."""
    if depth not in CONFIGS:
        raise ConfigError("depth", depth, f"one of {', '.join(map(str, CONFIGS))}")
    if layout == "cifar":
        return CifarVGG(depth, num_classes, batch_norm)
    if layout == "imagenet":
        name = f"vgg{depth}_bn" if batch_norm else f"vgg{depth}"
        return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    raise ConfigError("layout", layout, f"one of {', '.join(LAYOUTS)}")
