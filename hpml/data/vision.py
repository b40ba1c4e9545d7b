"""CIFAR-10 and MNIST read from disk in their official formats, with the transforms papers use by
default (``train_transforms``/``eval_transforms`` in the config replace them); missing or
unreadable files are one-line errors naming the path looked at."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.error import URLError

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision import transforms as T
from torchvision.datasets.utils import check_integrity

from hpml.data.base import DataDescription, HpmlDataModule
from hpml.data.formats import check_mnist, first_bad_cifar
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


def _hold_out(
    full: Dataset, fraction: float, seed: int, train_tf: Callable, eval_tf: Callable
) -> tuple[TransformedSubset, TransformedSubset]:
    """Split the official train set into train and val by a seeded permutation (same every run)."""
    n = len(full)  # type: ignore[arg-type]
    n_val = max(1, round(n * fraction))
    if n_val >= n:
        raise HpmlError(f"{n} training images are too few to hold out val_fraction={fraction}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return (
        TransformedSubset(full, order[n_val:], train_tf),
        TransformedSubset(full, order[:n_val], eval_tf),
    )


def _download(name: str, fetch: Callable[[], object]) -> None:
    """Run torchvision's download, turning network and archive failures into one line."""
    log.info("downloading %s", name)
    try:
        fetch()
    except (URLError, OSError, RuntimeError) as err:
        raise HpmlError(f"downloading {name} failed: {' '.join(str(err).split())}") from err


class _UnverifiedCIFAR10(datasets.CIFAR10):
    """CIFAR-10 that still requires every file but skips their md5 checks: torchvision's
    ``check_integrity(path, md5)`` only tests existence when md5 is None."""

    train_list: ClassVar[list[list[str | None]]] = [
        [name, None] for name, _ in datasets.CIFAR10.train_list
    ]
    test_list: ClassVar[list[list[str | None]]] = [
        [name, None] for name, _ in datasets.CIFAR10.test_list
    ]
    meta: ClassVar[dict[str, str | None]] = {**datasets.CIFAR10.meta, "md5": None}


class CIFAR10DataModule(HpmlDataModule):
    """CIFAR-10 from the pickled ``cifar-10-batches-py`` folder under ``data_dir``.

    val is ``val_fraction`` of the training images (seeded); test is the official test batch.
    ``verify=False`` skips the md5 checks. ``train_transforms`` (None: crop, flip, standardise)
    applies to train only, ``eval_transforms`` (None: standardise) to val and test.
    """

    def __init__(
        self,
        train_transforms: Sequence[Transform] | None = None,
        eval_transforms: Sequence[Transform] | None = None,
        val_fraction: float = 0.1,
        verify: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        sample, shape = Image.new("RGB", (32, 32)), (3, 32, 32)
        self.train_transform = pipeline(
            "train_transforms", train_transforms, cifar10_train_transforms(), sample, shape
        )
        self.eval_transform = pipeline(
            "eval_transforms", eval_transforms, cifar10_eval_transforms(), sample, shape
        )
        self.val_fraction = _val_fraction(val_fraction)
        self.verify = bool(verify)

    @property
    def spec(self) -> DataSpec:
        return image_spec((3, 32, 32), 10, self.train_transform, self.eval_transform)

    @property
    def folder(self) -> Path:
        return self.data_dir / datasets.CIFAR10.base_folder

    def _dataset_cls(self) -> type[datasets.CIFAR10]:
        return datasets.CIFAR10 if self.verify else _UnverifiedCIFAR10

    def _first_bad(self, check_md5: bool) -> Path | None:
        """The folder if absent, else the first file that is missing (or fails its md5)."""
        if not self.folder.is_dir():
            return self.folder
        for name, md5 in CIFAR_FILES:
            if not check_integrity(self.folder / name, md5 if check_md5 else None):
                return self.folder / name
        return None

    def _require_files(self) -> None:
        missing = self._first_bad(check_md5=False)
        if missing is not None:
            raise DatasetNotFoundError("CIFAR-10", missing, DOWNLOAD_HINT)

    def description(self) -> DataDescription:
        """The batches and meta file torchvision reads, by name, size and content."""
        files = [self.folder / name for name, _ in CIFAR_FILES]
        return DataDescription.of_files("cifar10", self.folder, files)

    def prepare_data(self) -> None:
        if self.download and self._first_bad(check_md5=self.verify) is not None:
            cls = self._dataset_cls()
            _download("CIFAR-10", lambda: cls(self.data_dir, train=False, download=True))
        self._require_files()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self._require_files()
        cls = self._dataset_cls()
        try:
            full = cls(self.data_dir, train=True)
            test = cls(self.data_dir, train=False, transform=self.eval_transform)
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
        self.train_set, self.val_set = _hold_out(
            full, self.val_fraction, self.seed, self.train_transform, self.eval_transform
        )
        self.test_set = test


class MNISTDataModule(HpmlDataModule):
    """MNIST from the uncompressed idx files in ``data_dir/MNIST/raw``.

    Pixels stay in [0, 1] by default, as a Bernoulli VAE reads them as probabilities;
    ``normalize=True`` standardises them for classifiers. val is held out from the train set;
    transforms (None: ``ToTensor``) run before ``normalize``.
    """

    def __init__(
        self,
        train_transforms: Sequence[Transform] | None = None,
        eval_transforms: Sequence[Transform] | None = None,
        normalize: bool = False,
        val_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        sample, shape = Image.new("L", (28, 28)), (1, 28, 28)
        standardise = [T.Normalize(MNIST_MEAN, MNIST_STD)] if normalize else []
        self.train_transform = pipeline(
            "train_transforms", train_transforms, [T.ToTensor()], sample, shape, standardise
        )
        self.eval_transform = pipeline(
            "eval_transforms", eval_transforms, [T.ToTensor()], sample, shape, standardise
        )
        self.val_fraction = _val_fraction(val_fraction)

    @property
    def spec(self) -> DataSpec:
        return image_spec((1, 28, 28), 10, self.train_transform, self.eval_transform)

    @property
    def folder(self) -> Path:
        # torchvision derives this from the class name, which is why MNIST is not subclassed here
        return self.data_dir / "MNIST" / "raw"

    def _first_missing(self) -> Path | None:
        if not self.folder.is_dir():
            return self.folder
        return next((self.folder / f for f in MNIST_FILES if not (self.folder / f).is_file()), None)

    def _require_files(self) -> None:
        missing = self._first_missing()
        if missing is not None:
            raise DatasetNotFoundError(
                "MNIST", missing, f"{DOWNLOAD_HINT}, or put the uncompressed idx files there"
            )
        check_mnist(self.folder, MNIST_FILES)

    def description(self) -> DataDescription:
        """The four idx files, by name, size and content (not the archives beside them)."""
        files = [self.folder / name for name in MNIST_FILES]
        return DataDescription.of_files("mnist", self.folder, files)

    def prepare_data(self) -> None:
        if self.download and self._first_missing() is not None:
            _download("MNIST", lambda: datasets.MNIST(self.data_dir, train=False, download=True))
        self._require_files()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self._require_files()
        try:
            full = datasets.MNIST(self.data_dir, train=True)
            test = datasets.MNIST(self.data_dir, train=False, transform=self.eval_transform)
        except (AssertionError, TypeError, ValueError, RuntimeError) as err:
            raise HpmlError(
                f"MNIST files in {self.folder} are not valid idx files ({type(err).__name__}): "
                f"delete them and set data.download=true"
            ) from err
        self.train_set, self.val_set = _hold_out(
            full, self.val_fraction, self.seed, self.train_transform, self.eval_transform
        )
        self.test_set = test
