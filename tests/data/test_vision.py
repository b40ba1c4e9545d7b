"""CIFAR-10 and MNIST data modules read tiny files written in the official on-disk formats."""

from __future__ import annotations

import io
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision import datasets

from hpml.data.vision import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    MNIST_MEAN,
    MNIST_STD,
    CIFAR10DataModule,
    MNISTDataModule,
    cifar10_eval_transforms,
)
from hpml.errors import ConfigError, DatasetNotFoundError, HpmlError

CIFAR_TRAIN_PER_BATCH, CIFAR_TEST = 4, 6


class Py2Pickler(pickle._Pickler):
    """Writes ``bytes`` as Python 2 ``str`` (BINSTRING), as the official CIFAR pickles hold them.

    Python 3 reads those back as ``str`` with ``encoding="latin1"`` (what torchvision uses) and as
    ``bytes`` with ``encoding="bytes"`` (what the CIFAR web page suggests).
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def write_py2_pickle(path: Path, obj: object) -> None:
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(obj)
    path.write_bytes(buffer.getvalue())


def cifar_images(n: int, offset: int) -> np.ndarray:
    """``n`` rows of 3072 bytes (1024 R, 1024 G, 1024 B, each row-major 32x32)."""
    rows = np.arange(n * 3072).reshape(n, 3072) * 7 + offset
    return (rows % 256).astype(np.uint8)


@pytest.fixture
def cifar_root(tmp_path: Path) -> Path:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for b in range(1, 6):
        n = CIFAR_TRAIN_PER_BATCH
        batch = {
            b"batch_label": f"training batch {b} of 5".encode(),
            b"labels": [(b * n + i) % 10 for i in range(n)],
            b"data": cifar_images(n, offset=b),
            b"filenames": [f"img_{b}_{i}.png".encode() for i in range(n)],
        }
        write_py2_pickle(folder / f"data_batch_{b}", batch)
    test = {
        b"batch_label": b"testing batch 1 of 1",
        b"labels": [9, 8, 7, 6, 5, 4],
        b"data": cifar_images(CIFAR_TEST, offset=0),
        b"filenames": [f"test_{i}.png".encode() for i in range(CIFAR_TEST)],
    }
    write_py2_pickle(folder / "test_batch", test)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer"]
    names += [b"dog", b"frog", b"horse", b"ship", b"truck"]
    meta = {b"num_cases_per_batch": 10000, b"label_names": names, b"num_vis": 3072}
    write_py2_pickle(folder / "batches.meta", meta)
    return tmp_path


def expected_cifar(row: np.ndarray) -> torch.Tensor:
    image = torch.from_numpy(row.astype(np.float32)).reshape(3, 32, 32) / 255
    mean, std = torch.tensor(CIFAR10_MEAN), torch.tensor(CIFAR10_STD)
    return (image - mean[:, None, None]) / std[:, None, None]


def test_cifar_fixture_matches_the_official_pickle_layout(cifar_root: Path) -> None:
    with open(cifar_root / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    assert batch[b"data"].dtype == np.uint8
    assert batch[b"data"].shape == (CIFAR_TRAIN_PER_BATCH, 3072)


def test_cifar_reads_batches_and_normalises_known_pixels(cifar_root: Path) -> None:
    dm = CIFAR10DataModule(
        data_dir=cifar_root,
        verify=False,
        val_fraction=0.25,
        train_transforms=cifar10_eval_transforms(),  # no crop or flip: pixels stay where known
    )
    dm.prepare_data()
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (15, 5, 6)
    image, label = dm.test_set[0]
    assert image.dtype == torch.float32 and image.shape == (3, 32, 32)
    assert label == 9
    torch.testing.assert_close(image, expected_cifar(cifar_images(CIFAR_TEST, 0)[0]))
    # train image k of batch b is official index (b - 1) * 4 + k
    index = dm.train_set.indices[0]
    b, k = index // CIFAR_TRAIN_PER_BATCH + 1, index % CIFAR_TRAIN_PER_BATCH
    image, label = dm.train_set[0]
    torch.testing.assert_close(image, expected_cifar(cifar_images(4, offset=b)[k]))
    assert label == (b * CIFAR_TRAIN_PER_BATCH + k) % 10
    assert dm.spec.input_shape == (3, 32, 32) and dm.spec.num_classes == 10


def test_cifar_val_is_a_seeded_disjoint_holdout_never_augmented(cifar_root: Path) -> None:
    def split(seed: int) -> CIFAR10DataModule:
        dm = CIFAR10DataModule(data_dir=cifar_root, verify=False, val_fraction=0.25, seed=seed)
        dm.setup("fit")
        return dm

    dm = split(0)
    train, val = dm.train_set.indices, dm.val_set.indices
    assert sorted(train + val) == list(range(20))
    assert split(0).val_set.indices == val
    assert split(1).val_set.indices != val
    image, _ = dm.val_set[0]  # train is cropped and flipped, but val images come back unchanged
    b, k = val[0] // CIFAR_TRAIN_PER_BATCH + 1, val[0] % CIFAR_TRAIN_PER_BATCH
    torch.testing.assert_close(image, expected_cifar(cifar_images(4, offset=b)[k]))
    assert dm.train_set[0][0].shape == (3, 32, 32)


def test_cifar_setup_is_idempotent_and_limit_caps_loaders(cifar_root: Path) -> None:
    dm = CIFAR10DataModule(data_dir=cifar_root, verify=False, limit=3, batch_size=2)
    dm.prepare_data()
    dm.setup("fit")
    train_set = dm.train_set
    dm.prepare_data()
    dm.setup("fit")
    assert dm.train_set is train_set
    loader = dm.train_dataloader()
    assert sum(len(y) for _, y in loader) == 3
    x, y = next(iter(loader))
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert sum(len(y) for _, y in dm.test_dataloader()) == 3


def test_cifar_md5_check_is_on_by_default(cifar_root: Path) -> None:
    dm = CIFAR10DataModule(data_dir=cifar_root)
    dm.prepare_data()  # the files exist; only their checksums are wrong
    with pytest.raises(HpmlError, match="md5") as info:
        dm.setup("fit")
    assert str(cifar_root / "cifar-10-batches-py" / "data_batch_1") in str(info.value)
    assert "data.verify=false" in str(info.value)


def test_cifar_missing_folder_names_the_path(tmp_path: Path) -> None:
    dm = CIFAR10DataModule(data_dir=tmp_path)
    with pytest.raises(DatasetNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert "data.download=true" in message and "\n" not in message
    with pytest.raises(DatasetNotFoundError):
        dm.setup("fit")


def test_cifar_missing_file_names_that_file(cifar_root: Path) -> None:
    (cifar_root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DatasetNotFoundError, match="test_batch"):
        CIFAR10DataModule(data_dir=cifar_root, verify=False).setup("fit")


@pytest.mark.parametrize("fraction", [0, 1, 1.5, True])
def test_val_fraction_must_be_a_proper_fraction(fraction: float) -> None:
    with pytest.raises(ConfigError, match="val_fraction"):
        CIFAR10DataModule(val_fraction=fraction)


MNIST_TRAIN, MNIST_TEST = 12, 5


def mnist_pixels(n: int, offset: int) -> np.ndarray:
    return ((np.arange(n * 784).reshape(n, 28, 28) * 3 + offset) % 256).astype(np.uint8)


def write_idx(raw: Path, prefix: str, images: np.ndarray, labels: list[int]) -> None:
    n = len(labels)
    header = struct.pack(">IIII", 2051, n, 28, 28)
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.tobytes())
    header = struct.pack(">II", 2049, n)
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + bytes(labels))


@pytest.fixture
def mnist_root(tmp_path: Path) -> Path:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    write_idx(raw, "train", mnist_pixels(MNIST_TRAIN, 1), [i % 10 for i in range(MNIST_TRAIN)])
    write_idx(raw, "t10k", mnist_pixels(MNIST_TEST, 2), [7, 2, 1, 0, 4])
    return tmp_path


def test_mnist_reads_idx_files_with_pixels_in_unit_range(mnist_root: Path) -> None:
    dm = MNISTDataModule(data_dir=mnist_root, val_fraction=0.25)
    dm.prepare_data()
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (9, 3, 5)
    image, label = dm.test_set[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32 and label == 7
    expected = torch.from_numpy(mnist_pixels(MNIST_TEST, 2)[0]).float()[None] / 255
    torch.testing.assert_close(image, expected)
    assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
    index = dm.val_set.indices[0]
    assert dm.val_set[0][1] == index % 10
    assert dm.spec.value_range == (0.0, 1.0) and dm.spec.input_shape == (1, 28, 28)
    assert sorted(dm.train_set.indices + dm.val_set.indices) == list(range(MNIST_TRAIN))


def test_mnist_normalize_standardises(mnist_root: Path) -> None:
    dm = MNISTDataModule(data_dir=mnist_root, normalize=True)
    dm.setup("fit")
    image, _ = dm.test_set[1]
    raw = torch.from_numpy(mnist_pixels(MNIST_TEST, 2)[1]).float()[None] / 255
    torch.testing.assert_close(image, (raw - MNIST_MEAN[0]) / MNIST_STD[0])
    assert dm.spec.value_range is None


def test_mnist_missing_files_name_the_raw_folder(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        MNISTDataModule(data_dir=tmp_path).prepare_data()
    assert str(tmp_path / "MNIST" / "raw") in str(info.value)
    assert "data.download=true" in str(info.value)


def test_mnist_bad_idx_file_is_one_line(mnist_root: Path) -> None:
    (mnist_root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").write_bytes(b"not idx")
    with pytest.raises(HpmlError, match="t10k-labels-idx1-ubyte is not a valid MNIST idx file"):
        MNISTDataModule(data_dir=mnist_root).setup("fit")


def test_cifar_download_only_when_files_are_missing(
    cifar_root: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched: list[Path] = []
    monkeypatch.setattr(datasets.CIFAR10, "download", lambda self: fetched.append(self.root))
    CIFAR10DataModule(data_dir=cifar_root, download=True, verify=False).prepare_data()
    assert fetched == []
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(HpmlError, match="downloading CIFAR-10 failed"):
        CIFAR10DataModule(data_dir=empty, download=True).prepare_data()
    assert fetched == [empty]
