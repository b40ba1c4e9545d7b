"""The sizes of an ImageFolder's training images, read from a sample of their headers, and the one
line a run prints before it upsamples them to ``data.image_size``: a folder of 32 px digits read
at ImageNet's 224 px costs 49 times the pixels of their own size, and nothing else says so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median_low

from hpml.data.formats import image_dimensions

SAMPLE = 64  # headers read: enough for a median, a few milliseconds even on ImageNet


@dataclass(frozen=True)
class ImageSizes:
    """``(width, height)`` in pixels of each sampled image."""

    sizes: tuple[tuple[int, int], ...]

    @classmethod
    def sample(cls, paths: Sequence[str | Path], count: int = SAMPLE) -> ImageSizes:
        """The sizes of up to ``count`` of ``paths``, evenly spaced over them (so over every
        class of an ImageFolder, whose samples are sorted by class); an unreadable file is a
        one-line error naming it."""
        n = len(paths)
        if n == 0:
            return cls(())
        k = min(n, count)
        picks = sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})
        return cls(tuple(image_dimensions(paths[i]) for i in picks))

    @property
    def short_side(self) -> int:
        """The median of the images' shorter sides, px: the ``data.image_size`` that reads the
        middle image at its own size (the resizes act on the short side)."""
        return median_low(min(size) for size in self.sizes)

    def describe(self) -> str:
        """``32x32 px (all 64 sampled)``, or the median width and height with the shortest and
        longest short side when the sizes differ."""
        if len(set(self.sizes)) == 1:
            width, height = self.sizes[0]
            return f"{width}x{height} px (all {len(self.sizes)} sampled)"
        width = median_low(w for w, _ in self.sizes)
        height = median_low(h for _, h in self.sizes)
        shorts = [min(size) for size in self.sizes]
        return (
            f"{width}x{height} px (median of {len(self.sizes)} sampled; short sides "
            f"{min(shorts)} to {max(shorts)} px)"
        )


def upsampling_note(where: Path, sizes: ImageSizes, image_size: int) -> str | None:
    """The line to print before training on the images of ``where`` when the median one is
    smaller than ``image_size`` px (upsampled: more compute, no more detail), with the value of
    ``data.image_size`` that keeps them at their size; None when they are not upsampled."""
    if not sizes.sizes or sizes.short_side >= image_size:
        return None
    own = sizes.short_side
    ratio = (image_size / own) ** 2
    return (
        f"hpml: ImageFolder {where}: its training images are {sizes.describe()}, smaller than "
        f"data.image_size={image_size}, so each is upsampled to {image_size}x{image_size} px "
        f"({ratio:.3g}x the pixels of {own}x{own}); data.image_size={own} keeps them at their "
        "size"
    )
