"""Which square image sizes a network takes, found by shape-only passes on the meta device.

Two questions are asked of a net at a size: does it run at all, and does it run *as laid out*:
an adaptive pool that has to enlarge its input means the image is smaller than the layout was
built for, and the classifier reads copies of the same few features.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

CANDIDATES = (8, 16, 28, 32, 48, 64, 96, 128, 160, 192, 224, 256, 299, 320, 384, 448, 512)
MAX_SIZE = 1024
ADAPTIVE_POOLS = (
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
)


@dataclass(frozen=True)
class Pass:
    """What one meta pass at one size showed."""

    runs: bool
    stretched: str | None = None  # "AdaptiveAvgPool2d enlarges 1x1 to 7x7", when one does

    @property
    def as_laid_out(self) -> bool:
        return self.runs and self.stretched is None


def probe(net: nn.Module, channels: int, size: int) -> Pass:
    """Run ``net`` in eval mode (batch norm takes one image) on one meta image of ``channels x
    size x size``, its mode restored after; see :class:`Pass`."""
    stretched: list[str] = []

    def watch(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        sizes = inputs[0].shape[2:], output.shape[2:]
        if not stretched and any(a > b for b, a in zip(*sizes, strict=False)):
            before, after = ("x".join(map(str, size)) for size in sizes)
            stretched.append(f"{type(module).__name__} enlarges {before} to {after}")

    hooks = [m.register_forward_hook(watch) for m in net.modules() if isinstance(m, ADAPTIVE_POOLS)]
    training = net.training
    try:
        net.eval()(torch.empty(1, channels, size, size, device="meta"))
    except (RuntimeError, ValueError, IndexError):
        return Pass(False)
    finally:
        net.train(training)
        for hook in hooks:
            hook.remove()
    return Pass(True, stretched[0] if stretched else None)


def size_range(fits: Callable[[int], bool]) -> tuple[int, int | None] | None:
    """The sizes ``fits`` accepts around the first candidate it accepts: (smallest, largest),
    the largest None when it still fits at ``MAX_SIZE``; None when no candidate fits. Assumes the
    accepted sizes are one interval, as they are for plain conv nets."""
    start = next((size for size in CANDIDATES if fits(size)), None)
    if start is None:
        return None
    smallest = 1 + bisect_left(range(1, start), True, key=fits)
    if fits(MAX_SIZE):
        return smallest, None
    beyond = range(start + 1, MAX_SIZE)  # the first size that does not fit: here, or MAX_SIZE
    return smallest, start + bisect_left(beyond, True, key=lambda size: not fits(size))


def sizes_text(sizes: tuple[int, int | None]) -> str:
    """``32x32 to 63x63`` or ``224x224 and larger``."""
    low, high = sizes
    if high is None:
        return f"{low}x{low} and larger"
    return f"{low}x{low}" if low == high else f"{low}x{low} to {high}x{high}"
