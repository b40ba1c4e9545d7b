"""The ImageFolder data module reads tiny class folders of JPEGs and PNGs written here: their
classes, their sizes (said before they are upsampled), crops that keep a small image, and damaged
files named in one line."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from hpml.data.image_folder import ImageFolderDataModule
from hpml.data.image_sizes import ImageSizes
from hpml.errors import DatasetNotFoundError, HpmlError


def write_jpegs(root: Path, layout: dict[str, dict[str, int]]) -> None:
    """``layout[split][class]`` JPEGs of 40x48 pixels, each class its own colour."""
    for split, classes in layout.items():
        for c, (name, count) in enumerate(sorted(classes.items())):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                colour = (80 * c, 40 + 20 * i, 200 - 60 * c)
                Image.new("RGB", (40, 48), colour).save(folder / f"{name}_{i}.JPEG")


@pytest.fixture
def folder_root(tmp_path: Path) -> Path:
    classes = {"n01": 2, "n02": 3, "n03": 2}
    write_jpegs(tmp_path, {"train": classes, "val": dict.fromkeys(classes, 1)})
    return tmp_path


def test_image_folder_counts_classes_and_applies_transforms(folder_root: Path) -> None:
    dm = ImageFolderDataModule(data_dir=folder_root, image_size=32, batch_size=4)
    assert dm.spec.num_classes == 3 and dm.spec.input_shape == (3, 32, 32)  # before setup
    dm.prepare_data()
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set)) == (7, 3)
    assert dm.test_set is dm.val_set
    image, label = dm.val_set[2]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32 and label == 2
    # a flat colour survives resize and crop: check the red channel after normalisation
    torch.testing.assert_close(
        image[0].mean(), torch.tensor((160 / 255 - 0.485) / 0.229), atol=0.05, rtol=0
    )
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 32, 32) and set(y.tolist()) <= {0, 1, 2}


def test_image_folder_missing_split_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        ImageFolderDataModule(data_dir=tmp_path).prepare_data()
    message = str(info.value)
    assert str(tmp_path / "train") in message and "train/<class>" in message


def test_image_folder_train_and_val_classes_must_match(tmp_path: Path) -> None:
    write_jpegs(tmp_path, {"train": {"cat": 1, "dog": 1}, "val": {"cat": 1, "eel": 1}})
    with pytest.raises(HpmlError, match="only in train/: dog; only in val/: eel") as info:
        _ = ImageFolderDataModule(data_dir=tmp_path).spec
    assert "\n" not in str(info.value)


def test_image_folder_empty_class_is_one_line(folder_root: Path) -> None:
    (folder_root / "train" / "n04").mkdir()
    (folder_root / "val" / "n04").mkdir()
    with pytest.raises(HpmlError, match="n04"):
        ImageFolderDataModule(data_dir=folder_root).setup("fit")


def write_pngs(root: Path, sizes: list[tuple[int, int]]) -> list[Path]:
    """PNGs of ``sizes`` (width, height) under ``train/`` (two classes taking turns), and one of
    the first size in each class of ``val/``; the train files, in ImageFolder's order."""
    written = []
    for i, size in enumerate(sizes):
        folder = root / "train" / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (40 * i, 90, 200)).save(folder / f"{i}.png")
        written.append(folder / f"{i}.png")
    for c in range(2):
        (root / "val" / f"c{c}").mkdir(parents=True)
        Image.new("RGB", sizes[0], (9, 9, 9)).save(root / "val" / f"c{c}" / "v.png")
    return sorted(written)


def test_small_images_are_upsampled_after_one_line_naming_their_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # short sides 8, 12, 16, 12, 16: median 12; widths' median 16, heights' median 16
    write_pngs(tmp_path, [(8, 8), (16, 12), (16, 16), (12, 16), (20, 16)])
    with caplog.at_level(logging.WARNING, logger="hpml.data.image_folder"):
        ImageFolderDataModule(data_dir=tmp_path, image_size=32).setup("fit")
        ImageFolderDataModule(data_dir=tmp_path, image_size=12).setup("fit")  # not upsampled
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        f"hpml: ImageFolder {tmp_path / 'train'}: its training images are 16x16 px (median of 5 "
        "sampled; short sides 8 to 16 px), smaller than data.image_size=32, so each is upsampled "
        "to 32x32 px (7.11x the pixels of 12x12); data.image_size=12 keeps them at their size"
    )


def test_images_of_one_size_are_described_once() -> None:
    sizes = ImageSizes(((16, 16),) * 3)
    assert sizes.describe() == "16x16 px (all 3 sampled)" and sizes.short_side == 16


def test_the_sample_spreads_over_every_class(tmp_path: Path) -> None:
    paths = write_pngs(tmp_path, [(8 + i, 8) for i in range(10)])
    sampled = ImageSizes.sample(paths, count=4)
    assert [w for w, _ in sampled.sizes] == [8, 14, 11, 17]  # files 0, 3, 6, 9 of c0 then c1


def coordinates(size: int) -> Image.Image:
    """Each pixel's red and green say where it is; blue 255 marks the image's own pixels."""
    x, y = np.meshgrid(np.arange(size), np.arange(size))
    pixels = np.stack([8 * x + 4, 8 * y + 4, np.full_like(x, 255)], axis=-1)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def shown(out: torch.Tensor) -> float:
    """The share of the source image's pixels that a transformed one shows."""
    pixels = (out * 255).round().to(torch.int64)
    own = pixels[2] == 255
    return len(set(zip(pixels[0][own].tolist(), pixels[1][own].tolist(), strict=True))) / 32**2


def test_a_32px_image_trains_on_most_of_itself() -> None:
    dm = ImageFolderDataModule(image_size=32)
    steps = [step for s in dm.train_transform.transforms for step in getattr(s, "transforms", [s])]
    assert not any(isinstance(step, T.RandomResizedCrop) for step in steps)
    crop = next(step for step in steps if isinstance(step, T.RandomCrop))
    assert crop.size == (32, 32) and crop.padding == 4  # CIFAR-10's crop
    image = coordinates(32)
    train = T.Compose([*dm.train_transform.transforms[:2], T.ToTensor()])
    kept = []
    for seed in range(16):
        torch.manual_seed(seed)
        kept.append(shown(train(image)))
    assert min(kept) >= (28 / 32) ** 2 and max(kept) == 1.0  # at most 4 px off each way
    evaluate = T.Compose([*dm.eval_transform.transforms[:2], T.ToTensor()])
    assert shown(evaluate(image)) == 1.0  # evaluated whole, not its centre 28 px
    # photos keep ImageNet's recipe
    large = ImageFolderDataModule(image_size=224).train_transform.transforms[0]
    assert isinstance(large, T.RandomResizedCrop) and large.scale == (0.08, 1.0)


@pytest.mark.parametrize("keep", [20, 50])
def test_a_truncated_png_is_named_in_one_line(tmp_path: Path, keep: int) -> None:
    paths = write_pngs(tmp_path, [(16, 16)] * 4)
    bad = paths[1]
    bad.write_bytes(bad.read_bytes()[:keep])  # 20: in its header; 50: in its pixels (of 82)
    dm = ImageFolderDataModule(data_dir=tmp_path, image_size=16)
    with pytest.raises(HpmlError) as info:
        dm.setup("fit")  # a header cut short is found in the sample of sizes, before training
        assert keep > 20
        dm.train_set[1]  # pixels cut short: when the image is read
    message = str(info.value)
    assert message.startswith(f"{bad} is not a readable image (OSError: ")
    assert message.endswith("expected a JPEG or PNG file; replace or delete it")
    assert "\n" not in message
