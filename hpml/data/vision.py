"""CIFAR-10 and MNIST read from disk in their official formats, with the transforms papers use by
default (``train_transforms``/``eval_transforms`` in the config replace them); missing or
unreadable files are one-line errors naming the path looked at."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar
from urllib.error import URLError

import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision import transforms as T
from torchvision.datasets.utils import check_integrity

from hpml.data.base import DataDescription, HpmlDataModule
from hpml.data.batch_transforms import BatchImages, batch_images
from hpml.data.formats import check_mnist, first_bad_cifar
from hpml.data.placement import Tensors
from hpml.data.spec import DataSpec
from hpml.data.transforms import Transform, image_spec, pipeline
from hpml.errors import ConfigError, DatasetNotFoundError, HpmlError

log = logging.getLogger(__name__)

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DOWNLOAD_HINT = "download it with data.download=true"
CIFAR = datasets.CIFAR10
# (name, md5) of every file torchvision reads: the data batches, then the meta file
CIFAR_FILES = [*CIFAR.train_list, *CIFAR.test_list, [CIFAR.meta["filename"], CIFAR.meta["md5"]]]


def cifar10_eval_transforms() -> list[Transform]:
    """Tensor, standardised per channel: what conf/data/cifar10.yaml lists as eval_transforms."""
    return [T.ToTensor(), T.Normalize(CIFAR10_MEAN, CIFAR10_STD)]


def cifar10_train_transforms() -> list[Transform]:
    """A random 32x32 crop of the 4-pixel padded image and a horizontal flip, then as eval: the
    augmentation of the ResNet and VGG CIFAR papers (conf/data/cifar10.yaml's train_transforms)."""
    return [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), *cifar10_eval_transforms()]


class TransformedSubset(Dataset):
    """Some samples of a dataset, each passed through ``transform``: the train and held-out val
    splits share one decoded dataset while only train is augmented."""

    def __init__(self, dataset: Dataset, indices: Sequence[int], transform: Callable) -> None:
        self.dataset, self.indices, self.transform = dataset, indices, transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, label = self.dataset[self.indices[index]]
        return self.transform(image), label


def _val_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ConfigError("val_fraction", value, "a number strictly between 0 and 1")
    return float(value)


class _UnverifiedCIFAR10(datasets.CIFAR10):
    """CIFAR-10 that still requires every file but skips their md5 checks: torchvision's
    ``check_integrity(path, md5)`` only tests existence when md5 is None."""

    train_list = tuple((name, None) for name, _ in CIFAR.train_list)
    test_list = tuple((name, None) for name, _ in CIFAR.test_list)
    meta: ClassVar[dict[str, str | None]] = {**CIFAR.meta, "md5": None}


class HeldOutImages(HpmlDataModule):
    """Ten classes of ``shape`` images that torchvision reads from ``files`` (name, md5) in the
    subclass's ``folder``, checked to be there first: val is its ``val_fraction`` of the training
    images, held out by a seeded permutation (the same every run); test is the official test
    split. Its ``train_transform`` applies to train only, ``eval_transform`` to val and test."""

    title: ClassVar[str]  # in messages
    key: ClassVar[str]  # the dataset's name in the run's record
    shape: ClassVar[tuple[int, int, int]]
    files: ClassVar[Sequence[Sequence[str | None]]]
    folder: Path  # set by the subclass: where its files are
    read_sets: tuple[Dataset, Dataset, list[int]] | None = None  # train, test, held-out val
    train_indices: list[int]
    missing_hint: ClassVar[str] = DOWNLOAD_HINT
    verify = False  # whether a file that fails its md5 is downloaded again

    @property
    def spec(self) -> DataSpec:
        return image_spec(self.shape, 10, self.train_transform, self.eval_transform)

    def torchvision_dataset(self) -> type[datasets.VisionDataset]:
        """The torchvision class that reads (and downloads) these files."""
        raise NotImplementedError

    def pixels(self, dataset: Dataset) -> tuple[Tensor, Tensor]:
        """All of ``dataset``'s images as ``uint8`` N x C x H x W, and its labels."""
        raise NotImplementedError

    def in_memory_problem(self) -> str | None:
        """Why the transforms have no batch form (:mod:`hpml.data.batch_transforms`), naming
        the first that has none; None when both have one."""
        for key, form in self.batch_forms.items():
            if isinstance(form, str):
                return f"data.{key}: {form}"
        return None

    def in_memory(self, split: str) -> Tensors:
        """The split's stored images, with its transforms' batch form."""
        assert self.read_sets is not None  # set up
        full, test, held_out = self.read_sets
        images, labels = self.pixels(test if split == "test" else full)
        if split != "test":
            index = torch.tensor(held_out if split == "val" else self.train_indices)
            images, labels = images[index], labels[index]
        form = self.batch_forms["train_transforms" if split == "train" else "eval_transforms"]
        assert not isinstance(form, str)  # refused by placement_problem
        return Tensors(images, labels, form)

    def read(self) -> tuple[Dataset, Dataset]:
        """The official train set, untransformed, and the test set, with the eval transforms."""
        cls = self.torchvision_dataset()
        full = cls(self.data_dir, train=True)
        return full, cls(self.data_dir, train=False, transform=self.eval_transform)

    @cached_property
    def batch_forms(self) -> dict[str, BatchImages | str]:
        """Each transform list's batch form, or why it has none, by its config key."""
        return {
            "train_transforms": batch_images(self.train_transform, self.shape),
            "eval_transforms": batch_images(self.eval_transform, self.shape),
        }

    def _first_bad(self, check_md5: bool = False) -> Path | None:
        """The folder if absent, else the first file that is missing (or fails its md5)."""
        if not self.folder.is_dir():
            return self.folder
        for name, md5 in self.files:
            if not check_integrity(self.folder / name, md5 if check_md5 else None):
                return self.folder / name
        return None

    def _require_files(self) -> None:
        missing = self._first_bad()
        if missing is not None:
            raise DatasetNotFoundError(self.title, missing, self.missing_hint)

    def description(self) -> DataDescription:
        """The files torchvision reads, by name, size and content (not the archives beside
        them)."""
        files = [self.folder / name for name, _ in self.files]
        return DataDescription.of_files(self.key, self.folder, files)

    def prepare_data(self) -> None:
        """Torchvision's download where a file is missing (or, verified, fails its md5), its
        network and archive failures in one line."""
        if self.download and self._first_bad(check_md5=self.verify) is not None:
            log.info("downloading %s", self.title)
            try:
                self.torchvision_dataset()(self.data_dir, train=False, download=True)
            except (URLError, OSError, RuntimeError) as err:
                message = " ".join(str(err).split())
                raise HpmlError(f"downloading {self.title} failed: {message}") from err
        self._require_files()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self._require_files()
        full, test = self.read()
        n = len(full)  # type: ignore[arg-type]
        n_val = max(1, round(n * self.val_fraction))
        if n_val >= n:
            raise HpmlError(
                f"{n} training images are too few to hold out val_fraction={self.val_fraction}"
            )
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).tolist()
        self.train_indices = order[n_val:]
        self.read_sets = (full, test, order[:n_val])
        self.train_set = TransformedSubset(full, self.train_indices, self.train_transform)
        self.val_set = TransformedSubset(full, order[:n_val], self.eval_transform)
        self.test_set = test


class CIFAR10DataModule(HeldOutImages):
    """CIFAR-10 from the pickled ``cifar-10-batches-py`` folder under ``data_dir``.

    ``verify=False`` skips the md5 checks. ``train_transforms`` default to crop, flip,
    standardise, ``eval_transforms`` to standardise.
    """

    title = "CIFAR-10"
    key = "cifar10"
    shape = (3, 32, 32)
    files = CIFAR_FILES

    def __init__(
        self,
        train_transforms: Sequence[Transform] | None = None,
        eval_transforms: Sequence[Transform] | None = None,
        val_fraction: float = 0.1,
        verify: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        sample = Image.new("RGB", (32, 32))
        self.train_transform = pipeline(
            "train_transforms", train_transforms, cifar10_train_transforms(), sample, self.shape
        )
        self.eval_transform = pipeline(
            "eval_transforms", eval_transforms, cifar10_eval_transforms(), sample, self.shape
        )
        self.val_fraction = _val_fraction(val_fraction)
        self.verify = bool(verify)
        self.folder = self.data_dir / CIFAR.base_folder

    def torchvision_dataset(self) -> type[datasets.CIFAR10]:
        return CIFAR if self.verify else _UnverifiedCIFAR10

    def pixels(self, dataset: Dataset) -> tuple[Tensor, Tensor]:
        images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()  # type: ignore[attr-defined]
        return images, torch.tensor(dataset.targets)  # type: ignore[attr-defined]

    def read(self) -> tuple[Dataset, Dataset]:
        try:
            return super().read()
        except RuntimeError as err:  # the files exist, so torchvision is reporting an md5 mismatch
            bad = self._first_bad(check_md5=True) or self.folder
            raise HpmlError(
                f"{bad} fails its md5 check (corrupt, or not the official file): delete it and set "
                "data.download=true, or set data.verify=false to use it anyway"
            ) from err
        except Exception as err:  # unverified files torchvision cannot unpickle or shape
            *batches, meta = [name for name, _ in CIFAR_FILES]
            raise first_bad_cifar(self.folder, batches, meta) or HpmlError(
                f"CIFAR-10 files in {self.folder} cannot be read ({type(err).__name__}: {err}): "
                "delete them and set data.download=true"
            ) from err


class MNISTDataModule(HeldOutImages):
    """MNIST from the uncompressed idx files in ``data_dir/MNIST/raw``.

    Pixels stay in [0, 1] by default, as a Bernoulli VAE reads them as probabilities;
    ``normalize=True`` standardises them for classifiers. Transforms (None: ``ToTensor``) run
    before ``normalize``.
    """

    title = "MNIST"
    key = "mnist"
    shape = (1, 28, 28)
    files = tuple((name, None) for name in MNIST_FILES)
    missing_hint = f"{DOWNLOAD_HINT}, or put the uncompressed idx files there"

    def __init__(
        self,
        train_transforms: Sequence[Transform] | None = None,
        eval_transforms: Sequence[Transform] | None = None,
        normalize: bool = False,
        val_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        sample, shape = Image.new("L", (28, 28)), self.shape
        standardise = [T.Normalize(MNIST_MEAN, MNIST_STD)] if normalize else []
        self.train_transform = pipeline(
            "train_transforms", train_transforms, [T.ToTensor()], sample, shape, standardise
        )
        self.eval_transform = pipeline(
            "eval_transforms", eval_transforms, [T.ToTensor()], sample, shape, standardise
        )
        self.val_fraction = _val_fraction(val_fraction)
        # torchvision derives this from the class name, which is why MNIST is not subclassed here
        self.folder = self.data_dir / "MNIST" / "raw"

    def torchvision_dataset(self) -> type[datasets.MNIST]:
        return datasets.MNIST

    def pixels(self, dataset: Dataset) -> tuple[Tensor, Tensor]:
        return dataset.data.unsqueeze(1).contiguous(), dataset.targets.clone()  # type: ignore[attr-defined]

    def _require_files(self) -> None:
        super()._require_files()
        check_mnist(self.folder, MNIST_FILES)

    def read(self) -> tuple[Dataset, Dataset]:
        try:
            return super().read()
        except (AssertionError, TypeError, ValueError, RuntimeError) as err:
            raise HpmlError(
                f"MNIST files in {self.folder} are not valid idx files ({type(err).__name__}): "
                f"delete them and set data.download=true"
            ) from err
