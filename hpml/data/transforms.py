"""Image transforms given in the config: lists of torchvision transforms that Hydra instantiates
(``train_transforms``, ``eval_transforms``), so a dataset whose images must not be flipped or
cropped says so in its config."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from PIL import Image
from torchvision import transforms as T

from hpml.errors import ConfigError

Transform = Callable[[Any], Any]
EXPECTED = "a non-empty list of transforms, each a {_target_: torchvision.transforms.<Name>} node"


def transform_list(key: str, value: Sequence[Transform] | None, default: list[Transform]) -> list:
    """``value`` as a list of callables (``default`` when None), else a ConfigError naming
    ``key``, refused when the data module is built rather than by the DataLoader mid-epoch."""
    if value is None:
        return default
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigError(key, value, EXPECTED)
    steps = list(value)
    if not steps or not all(callable(step) for step in steps):
        raise ConfigError(key, steps, EXPECTED)
    return steps


def pipeline(
    key: str,
    value: Sequence[Transform] | None,
    default: list[Transform],
    sample: Image.Image,
    shape: tuple[int, ...],
    then: Sequence[Transform] = (),
) -> T.Compose:
    """The transforms of ``value`` (then ``then``), checked on ``sample``, a blank image in the
    dataset's format, to give the float ``shape`` tensor the model is built for; the global RNGs
    are restored, so the probe leaves a seeded run's draws unchanged."""
    steps = transform_list(key, value, default)
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


def value_range(*pipelines: Sequence[Transform]) -> tuple[float, float] | None:
    """``(0.0, 1.0)`` unless some pipeline standardises pixels (a ``Normalize``): what
    :class:`~hpml.data.spec.DataSpec` tells a model that needs pixels as probabilities (the VAE)."""
    if any(isinstance(step, T.Normalize) for steps in pipelines for step in steps):
        return None
    return (0.0, 1.0)


class ResizeForCenterCrop(T.Resize):
    """Resize the short side to ``crop_size / crop_fraction`` (256 for a 224 crop, ImageNet's
    standard evaluation), so the config can size it from ``${data.image_size}``: OmegaConf has
    no arithmetic to write ``image_size * 256 / 224`` with."""

    def __init__(self, crop_size: int, crop_fraction: float = 0.875, **kwargs: Any) -> None:
        super().__init__(int(crop_size / crop_fraction), **kwargs)
