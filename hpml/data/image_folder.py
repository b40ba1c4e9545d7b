"""ImageNet-style class folders on disk (train/ and val/), with the transforms papers use by
default, for photos and for small images alike (``train_transforms``/``eval_transforms`` in the
config replace them). Missing folders, mismatched class lists, empty class folders and unreadable
images are one-line errors naming the path; images smaller than ``image_size`` are upsampled only
after a line that says so."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image
from torchvision import datasets
from torchvision import transforms as T
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes

from hpml.data.base import DataDescription, HpmlDataModule
from hpml.data.formats import empty_class_folder, load_image
from hpml.data.image_sizes import ImageSizes, upsampling_note
from hpml.data.spec import DataSpec
from hpml.data.transforms import (
    SMALL_IMAGE,
    Transform,
    eval_resize,
    image_spec,
    pipeline,
    train_crop,
)
from hpml.errors import DatasetNotFoundError, HpmlError, positive_int

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageFolderDataModule(HpmlDataModule):
    """ImageNet-style folders: ``data_dir/train/<class>/*.JPEG`` and ``data_dir/val/<class>/*``.

    val/ serves as both the val and the test split (ImageNet's test labels are not public); the
    class count is read from train/. Transforms (None: ImageNet's recipe above ``small_image``
    px, CIFAR-10's at or under) must end in ``image_size`` square tensors.
    """

    HINT = (
        "it cannot be downloaded; place an ImageFolder there laid out as "
        "train/<class>/*.JPEG and val/<class>/*.JPEG"
    )

    def __init__(
        self,
        image_size: int = 224,
        small_image: int = SMALL_IMAGE,
        train_transforms: Sequence[Transform] | None = None,
        eval_transforms: Sequence[Transform] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        size = self.image_size = positive_int("image_size", image_size)
        small = positive_int("small_image", small_image)
        # photos come in every size: probe with one that is neither square nor image_size
        sample, shape = Image.new("RGB", (size + 13, size + 7)), (3, size, size)
        # conf/data/imagenet.yaml's lists, built for this size
        standardise = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        train_default = [train_crop(size, small), T.RandomHorizontalFlip(), *standardise]
        eval_default = [eval_resize(size, small), T.CenterCrop(size), *standardise]
        self.train_transform = pipeline(
            "train_transforms", train_transforms, train_default, sample, shape
        )
        self.eval_transform = pipeline(
            "eval_transforms", eval_transforms, eval_default, sample, shape
        )
        self._classes: list[str] | None = None

    def _spec(self, num_classes: int) -> DataSpec:
        shape = (3, self.image_size, self.image_size)
        return image_spec(shape, num_classes, self.train_transform, self.eval_transform)

    @property
    def spec(self) -> DataSpec:
        return self._spec(len(self.classes()))

    def planned_spec(self) -> DataSpec:
        """The image size from the config; the class count from train/ if it can be read (a
        missing folder is the run's failure, reported when the data is prepared)."""
        try:
            return self.spec
        except HpmlError:
            return self._spec(1000)

    def classes(self) -> list[str]:
        """Class folder names, checked to be the same in train/ and val/."""
        if self._classes is None:
            found = {}
            for split in ("train", "val"):
                folder = self.data_dir / split
                try:
                    found[split] = find_classes(folder)[0]
                except FileNotFoundError as err:
                    raise DatasetNotFoundError("ImageFolder", folder, self.HINT) from err
            if found["train"] != found["val"]:
                only_train = _few(sorted(set(found["train"]) - set(found["val"])))
                only_val = _few(sorted(set(found["val"]) - set(found["train"])))
                raise HpmlError(
                    f"ImageFolder at {self.data_dir}: train/ and val/ have different class "
                    f"folders (only in train/: {only_train}; only in val/: {only_val})"
                )
            self._classes = found["train"]
        return self._classes

    def description(self) -> DataDescription:
        """The image files of train/ and val/ (one stat each; content within the digest's
        budget), links followed as torchvision's ImageFolder follows them; named after the
        folder: ``imagenet`` by default."""
        files = [
            Path(parent, name)
            for split in ("train", "val")
            for parent, _, names in os.walk(self.data_dir / split, followlinks=True)
            for name in names
            if name.lower().endswith(IMG_EXTENSIONS)
        ]
        name = self.data_dir.resolve().name or "image_folder"
        return DataDescription.of_files(name, self.data_dir, files)

    def prepare_data(self) -> None:
        self.classes()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self.classes()
        train_dir, val_dir = self.data_dir / "train", self.data_dir / "val"
        try:
            train = datasets.ImageFolder(train_dir, self.train_transform, loader=load_image)
            val = datasets.ImageFolder(val_dir, self.eval_transform, loader=load_image)
        except FileNotFoundError as err:  # a class folder holds no image files
            empty = empty_class_folder(self.data_dir)
            if empty is None:
                raise HpmlError(f"ImageFolder at {self.data_dir}: {err}") from err
            raise HpmlError(
                f"ImageFolder class folder {empty} holds no image file: expected "
                f"{', '.join(IMG_EXTENSIONS[:3])}... files in every class folder of train/ and "
                "val/; add images or delete the folder from both"
            ) from err
        sizes = ImageSizes.sample([path for path, _ in train.samples])
        if (note := upsampling_note(train_dir, sizes, self.image_size)) is not None:
            log.warning(note)
        self.train_set, self.val_set, self.test_set = train, val, val


def _few(names: list[str], shown: int = 5) -> str:
    """Names for a one-line message: the first few, then how many more."""
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
