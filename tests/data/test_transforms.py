"""The transform lists of conf/data/ are what the data modules hard-coded before they became
config values (small ImageFolder images: CIFAR-10's crop), and an override of them changes what a
sample becomes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from hpml.build import build
from hpml.data.image_folder import IMAGENET_MEAN, IMAGENET_STD, ImageFolderDataModule
from hpml.data.vision import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    MNIST_MEAN,
    MNIST_STD,
    CIFAR10DataModule,
    MNISTDataModule,
)
from hpml.errors import ConfigError
from tests.real_data import write_cifar10

SEEDS = range(12)
NO_FLIP = (
    "data.train_transforms=[{_target_: torchvision.transforms.RandomCrop, size: 32, padding: 4},"
    " ${data.eval_transforms.0}, ${data.eval_transforms.1}]"
)


# The transforms as hpml/data/ wrote them in code before the config held them.
def former_cifar(train: bool) -> T.Compose:
    normalize = [T.ToTensor(), T.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
    augment = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()] if train else []
    return T.Compose(augment + normalize)


def former_imagenet(size: int, train: bool) -> T.Compose:
    normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if train:
        return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *normalize])
    return T.Compose([T.Resize(int(size * 256 / 224)), T.CenterCrop(size), *normalize])


def small_folder(size: int, train: bool) -> T.Compose:
    """An ImageFolder at ``size`` <= 64 px: resized whole, then CIFAR-10's padded crop and flip."""
    normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if train:
        crop = [T.RandomCrop(size, padding=size // 8), T.RandomHorizontalFlip()]
        return T.Compose([T.Resize(size), *crop, *normalize])
    return T.Compose([T.Resize(size), T.CenterCrop(size), *normalize])


def former_mnist(normalize: bool) -> T.Compose:
    steps: list[Callable] = [T.ToTensor()]
    if normalize:
        steps.append(T.Normalize(MNIST_MEAN, MNIST_STD))
    return T.Compose(steps)


def noise_image(width: int, height: int, mode: str = "RGB") -> Image.Image:
    """Seeded noise: no symmetry, so every crop offset and every flip gives another tensor."""
    channels = 3 if mode == "RGB" else 1
    pixels = np.random.default_rng(width * height).integers(0, 256, (height, width, channels))
    return Image.fromarray(pixels.astype(np.uint8).squeeze(-1 if channels == 1 else None), mode)


def write_noise_folder(data_dir: Path) -> list[str]:
    """``imagenet/{train,val}/<class>/*.JPEG`` of noise, unlike the flat colours of
    ``write_imagenet``, which look the same however they are cropped or flipped."""
    for split in ("train", "val"):
        for c, name in enumerate(("n01", "n02")):
            folder = data_dir / "imagenet" / split / name
            folder.mkdir(parents=True)
            for i in range(3):
                noise_image(48 + c, 40 + i).save(folder / f"{name}_{i}.JPEG")
    return []


def draws(transform: Callable, image: Image.Image) -> list[torch.Tensor]:
    """``transform(image)`` once per seed of ``SEEDS``, the torch RNG seeded before each."""
    out = []
    for seed in SEEDS:
        torch.manual_seed(seed)
        out.append(transform(image))
    return out


def assert_same_draws(got: Callable, former: Callable, image: Image.Image) -> None:
    for new, old in zip(draws(got, image), draws(former, image), strict=True):
        torch.testing.assert_close(new, old, rtol=0, atol=0)


def distinct(tensors: list[torch.Tensor]) -> int:
    return len({t.numpy().tobytes() for t in tensors})


# (overrides, the same module built in Python without lists, former train, former eval, image)
DEFAULTS: dict[str, tuple[list[str], Callable[[], Any], T.Compose, T.Compose, Image.Image]] = {
    "cifar10": (
        ["data=cifar10"],
        CIFAR10DataModule,
        former_cifar(train=True),
        former_cifar(train=False),
        noise_image(32, 32),
    ),
    "imagenet": (
        ["data=imagenet"],
        ImageFolderDataModule,
        former_imagenet(224, train=True),
        former_imagenet(224, train=False),
        noise_image(300, 260),
    ),
    "imagenet_32": (
        ["data=imagenet", "data.image_size=32"],
        lambda: ImageFolderDataModule(image_size=32),
        small_folder(32, train=True),
        small_folder(32, train=False),
        noise_image(48, 40),
    ),
    "mnist": (
        ["data=mnist"],
        MNISTDataModule,
        former_mnist(normalize=False),
        former_mnist(normalize=False),
        noise_image(28, 28, "L"),
    ),
    "mnist_normalize": (
        ["data=mnist", "data.normalize=true"],
        lambda: MNISTDataModule(normalize=True),
        former_mnist(normalize=True),
        former_mnist(normalize=True),
        noise_image(28, 28, "L"),
    ),
}


@pytest.mark.parametrize("case", DEFAULTS)
def test_default_lists_give_the_former_tensors_draw_for_draw(composed, case: str) -> None:
    overrides, in_python, former_train, former_eval, image = DEFAULTS[case]
    from_config = build("data", composed(overrides).data)
    for dm in (from_config, in_python()):
        assert_same_draws(dm.train_transform, former_train, image)
        assert_same_draws(dm.eval_transform, former_eval, image)
    train = distinct(draws(from_config.train_transform, image))
    if case.startswith("mnist"):  # MNIST is not augmented
        assert train == 1
    else:  # crops and flips: a repeat among the seeds is possible, many are not
        assert train > len(SEEDS) // 2
    assert distinct(draws(from_config.eval_transform, image)) == 1
    normalize = [s for s in from_config.eval_transform.transforms if isinstance(s, T.Normalize)]
    # plain lists (the configs' _convert_: all): Normalize reads an OmegaConf list far slower
    assert all(type(step.mean) in (list, tuple) for step in normalize)
    assert from_config.planned_spec().value_range == ((0.0, 1.0) if case == "mnist" else None)


def test_imagenet_eval_resize_follows_image_size(composed) -> None:
    dm = build("data", composed(["data=imagenet", "data.image_size=96"]).data)
    resize, crop = dm.eval_transform.transforms[:2]
    assert resize.size == 109 and crop.size == (96, 96)  # int(96 * 256 / 224)
    assert dm.train_transform.transforms[0].size == (96, 96)


@pytest.mark.parametrize(
    ("option", "write", "overrides"),
    [
        ("cifar10", write_cifar10, []),
        ("imagenet", write_noise_folder, ["data.image_size=32"]),
    ],
)
def test_train_transforms_set_to_the_eval_list_make_train_deterministic(
    composed, tmp_path: Path, option: str, write: Callable[[Path], list[str]], overrides: list[str]
) -> None:
    needed = write(tmp_path)
    folder = tmp_path / "imagenet" if option == "imagenet" else tmp_path
    base = [f"data={option}", f"data.data_dir={folder}", *needed, *overrides]

    def train_draws(*more: str) -> list[torch.Tensor]:
        """One training image read from disk once per seed, the torch RNG seeded before each."""
        dm = build("data", composed([*base, *more]).data)
        dm.setup("fit")
        out = []
        for seed in SEEDS:
            torch.manual_seed(seed)
            out.append(dm.train_set[3][0])
        return out

    assert distinct(train_draws()) > 1  # the default list crops and flips
    assert distinct(train_draws("data.train_transforms=${data.eval_transforms}")) == 1


def test_the_flip_alone_can_be_dropped(composed) -> None:
    dm = build("data", composed(["data=cifar10", NO_FLIP]).data)
    kinds = [type(step) for step in dm.train_transform.transforms]
    assert kinds == [T.RandomCrop, T.ToTensor, T.Normalize]
    assert dm.train_transform.transforms[0].padding == 4
    image = noise_image(32, 32)
    flipped = T.Compose(dm.train_transform.transforms[1:])(image.transpose(Image.FLIP_LEFT_RIGHT))
    assert all(not torch.equal(out, flipped) for out in draws(dm.train_transform, image))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: CIFAR10DataModule(train_transforms="RandomCrop"), "train_transforms='RandomCrop'"),
        (lambda: CIFAR10DataModule(eval_transforms=[]), "eval_transforms=[]"),
        (lambda: CIFAR10DataModule(eval_transforms=[T.ToTensor(), 3]), "ToTensor(), 3]"),
        (
            lambda: CIFAR10DataModule(eval_transforms=[T.CenterCrop(24), T.ToTensor()]),
            "a 32x32 RGB image into a 3x32x32 float tensor (they give a 3x24x24 float32 tensor)",
        ),
        (
            lambda: ImageFolderDataModule(image_size=32, train_transforms=[T.ToTensor()]),
            "(they give a 3x39x45 float32 tensor)",
        ),
        (
            lambda: MNISTDataModule(train_transforms=[T.RandomHorizontalFlip()]),
            "(they give a PIL.Image.Image)",
        ),
        (
            lambda: MNISTDataModule(train_transforms=[T.PILToTensor()]),
            "(they give a 1x28x28 uint8 tensor)",
        ),
        (
            lambda: MNISTDataModule(
                eval_transforms=[T.ToTensor(), T.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
            ),
            "they fail on one: RuntimeError",
        ),
    ],
)
def test_lists_that_cannot_feed_the_model_are_refused_in_one_line(
    make: Callable[[], Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_probing_a_list_leaves_the_seeded_draws_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    CIFAR10DataModule()
    torch.testing.assert_close(torch.rand(3), expected)
