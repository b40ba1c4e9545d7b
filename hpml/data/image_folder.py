"""ImageNet-style class folders on disk (train/ and val/), with the transforms papers use.

Apart from ``hpml.data.vision`` because it needs none of that module's torchvision-dataset
machinery (downloads, md5 checks, a val split held out of train): the folders are placed by hand
and bring their own splits. Missing folders, mismatched class lists and empty class folders
become one-line hpml errors naming the path.
"""

from __future__ import annotations

from typing import Any

from torchvision import datasets
from torchvision import transforms as T
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes

from hpml.data.base import HpmlDataModule
from hpml.data.formats import empty_class_folder, load_image
from hpml.data.spec import DataSpec
from hpml.errors import DatasetNotFoundError, HpmlError, positive_int

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageFolderDataModule(HpmlDataModule):
    """ImageNet-style folders: ``data_dir/train/<class>/*.JPEG`` and ``data_dir/val/<class>/*``.

    val/ serves as both the val and the test split: ImageNet's test labels are not public, so
    reported ImageNet accuracy is val accuracy. The class count is read from train/.
    """

    HINT = (
        "it cannot be downloaded; place an ImageFolder there laid out as "
        "train/<class>/*.JPEG and val/<class>/*.JPEG"
    )

    def __init__(self, image_size: int = 224, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.image_size = positive_int("image_size", image_size)
        self._classes: list[str] | None = None

    @property
    def spec(self) -> DataSpec:
        size = self.image_size
        return DataSpec("image", (3, size, size), len(self.classes()))

    def planned_spec(self) -> DataSpec:
        """The image size from the config; the class count from train/ if it can be read (a
        missing folder is the run's failure, reported when the data is prepared)."""
        try:
            return self.spec
        except HpmlError:
            return DataSpec("image", (3, self.image_size, self.image_size), 1000)

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

    def prepare_data(self) -> None:
        self.classes()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self.classes()
        normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        train_tf = T.Compose(
            [T.RandomResizedCrop(self.image_size), T.RandomHorizontalFlip(), *normalize]
        )
        eval_tf = T.Compose(
            [
                T.Resize(int(self.image_size * 256 / 224)),
                T.CenterCrop(self.image_size),
                *normalize,
            ]
        )
        try:
            train = datasets.ImageFolder(self.data_dir / "train", train_tf, loader=load_image)
            val = datasets.ImageFolder(self.data_dir / "val", eval_tf, loader=load_image)
        except FileNotFoundError as err:  # a class folder holds no image files
            empty = empty_class_folder(self.data_dir)
            if empty is None:
                raise HpmlError(f"ImageFolder at {self.data_dir}: {err}") from err
            raise HpmlError(
                f"ImageFolder class folder {empty} holds no image file: expected "
                f"{', '.join(IMG_EXTENSIONS[:3])}... files in every class folder of train/ and "
                "val/; add images or delete the folder from both"
            ) from err
        self.train_set, self.val_set, self.test_set = train, val, val


def _few(names: list[str], shown: int = 5) -> str:
    """Names for a one-line message: the first few, then how many more."""
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
