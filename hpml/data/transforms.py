"""Image transforms given in the config: lists of torchvision transforms that Hydra instantiates
(``train_transforms``, ``eval_transforms``), so a dataset whose images must not be flipped or
cropped says so in its config; and the crops that suit an image size, small or large."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from PIL import Image
from torchvision import transforms as T

from hpml.data.spec import DataSpec
from hpml.errors import ConfigError

Transform = Callable[[Any], Any]
SMALL_IMAGE = 64  # px: Tiny ImageNet's size; CIFAR-10 (32) and MNIST (28) are under it
EXPECTED = "a non-empty list of transforms, each a {_target_: torchvision.transforms.<Name>} node"


def pipeline(
    key: str,
    value: Sequence[Transform] | None,
    default: list[Transform],
    sample: Image.Image,
    shape: tuple[int, ...],
    then: Sequence[Transform] = (),
) -> T.Compose:
    """The transforms of ``value`` (``default`` when None; then ``then``), checked on ``sample``,
    a blank image in the dataset's format, to give the float ``shape`` tensor the model is built
    for: a bad list is a ConfigError naming ``key`` when the data module is built, not the
    DataLoader's error mid-epoch. The global RNGs are restored, so the probe leaves a seeded
    run's draws unchanged."""
    if value is None:
        steps = default
    elif isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigError(key, value, EXPECTED)
    else:
        steps = list(value)
        if not steps or not all(callable(step) for step in steps):
            raise ConfigError(key, steps, EXPECTED)
    composed = T.Compose([*steps, *then])
    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            out = composed(sample)
        problem = None if _fits(out, shape) else f"they give {_describe(out)}"
    except Exception as exc:
        message = " ".join(str(exc).split())[:160]
        problem = f"they fail on one: {type(exc).__name__}: {message}"
    finally:
        random.setstate(state)
    if problem is not None:
        width, height = sample.size
        size = "x".join(map(str, shape))
        raise ConfigError(
            key,
            steps,
            f"transforms that turn a {width}x{height} {sample.mode} image into a {size} float "
            f"tensor ({problem})",
        )
    return composed


def _fits(out: Any, shape: tuple[int, ...]) -> bool:
    return isinstance(out, torch.Tensor) and out.is_floating_point() and tuple(out.shape) == shape


def _describe(out: Any) -> str:
    if isinstance(out, torch.Tensor):
        return f"a {'x'.join(map(str, out.shape))} {str(out.dtype).removeprefix('torch.')} tensor"
    return f"a {type(out).__module__}.{type(out).__qualname__}"


def image_spec(shape: tuple[int, ...], num_classes: int, *pipelines: T.Compose) -> DataSpec:
    """Images of ``shape`` in ``num_classes`` classes, in [0, 1] unless some pipeline standardises
    them (a ``Normalize``): what tells a model that needs pixels as probabilities (the VAE)."""
    standardised = any(isinstance(step, T.Normalize) for p in pipelines for step in p.transforms)
    return DataSpec("image", shape, num_classes, value_range=None if standardised else (0.0, 1.0))


def train_crop(size: int, small_image: int = SMALL_IMAGE) -> Transform:
    """The random crop that trains a model on ``size`` px squares.

    Above ``small_image`` px, ImageNet's ``RandomResizedCrop``: 8-100% of a photo's area, which
    at 32 px can leave a few pixels of a digit. At or under it, CIFAR-10's recipe (``RandomCrop(32,
    padding=4)``) at any size: the short side resized to ``size``, then a ``size`` square of the
    image padded by ``size // 8`` on every side, so at least 7/8 of the square's width and of its
    height (77% of its area) is the image's own.
    """
    if size > small_image:
        return T.RandomResizedCrop(size)
    return T.Compose([T.Resize(size), T.RandomCrop(size, padding=size // 8)])


def eval_resize(size: int, small_image: int = SMALL_IMAGE) -> Transform:
    """The resize before a ``size`` px centre crop: ImageNet's ``size * 256 / 224`` short side
    above ``small_image`` px (a photo's border is mostly background), ``size`` itself at or under
    it (a small image's border holds what it shows, and :func:`train_crop` trains on it whole)."""
    return T.Resize(size * 256 // 224 if size > small_image else size)
