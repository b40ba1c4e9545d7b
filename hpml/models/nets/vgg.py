"""VGG in the layouts the studies use: CIFAR (32x32, pytorch-cifar) and ImageNet (torchvision)."""

from __future__ import annotations

import torchvision
from torch import Tensor, nn
from torchvision.models.vgg import cfgs, make_layers

from hpml.errors import one_of

# Output channels per conv layer, "M" for a 2x2 max pool (Simonyan & Zisserman, configs A, B, D, E):
# torchvision's table, which its ImageNet layout builds from too.
CONFIGS: dict[int, list[int | str]] = {11: cfgs["A"], 13: cfgs["B"], 16: cfgs["D"], 19: cfgs["E"]}
LAYOUTS = ("cifar", "imagenet")


class CifarVGG(nn.Module):
    """VGG for 32x32 inputs as in the widely used pytorch-cifar code: torchvision's conv-BN-ReLU
    features, one Linear after five poolings bring 32x32 down to 1x1."""

    def __init__(self, depth: int = 11, num_classes: int = 10, batch_norm: bool = True) -> None:
        super().__init__()
        pool = nn.AvgPool2d(kernel_size=1, stride=1)
        self.features = nn.Sequential(*make_layers(CONFIGS[depth], batch_norm), pool)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x).flatten(1))


def vgg(
    depth: int = 11, num_classes: int = 10, layout: str = "cifar", batch_norm: bool = True
) -> nn.Module:
    """Build VGG-``depth`` in the ``cifar`` or ``imagenet`` (torchvision, 224x224) layout."""
    one_of("depth", depth, CONFIGS)
    if one_of("layout", layout, LAYOUTS) == "cifar":
        return CifarVGG(depth, num_classes, batch_norm)
    name = f"vgg{depth}_bn" if batch_norm else f"vgg{depth}"
    return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
