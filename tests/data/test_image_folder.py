"""The ImageFolder data module reads tiny class folders of JPEGs written here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from hpml.data.image_folder import ImageFolderDataModule
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
