"""Tiny datasets in the real on-disk formats, for runs of configs that read real data.

``write_real_data(option, data_dir)`` writes what ``data=<option>`` reads under ``paths.data_dir``
and returns the overrides the tiny files need (CIFAR's md5 check cannot pass on them). The byte
layouts come from the format tests in ``tests/data/``.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from tests.data.test_image_folder import write_jpegs
from tests.data.test_vision import cifar_images, mnist_pixels, write_idx, write_py2_pickle

WORDS = ("great", "awful", "plot", "actor", "boring", "loved", "scene", "music", "slow", "fun")


def write_imdb(data_dir: Path, reviews: int = 96) -> list[str]:
    """``imdb/IMDB Dataset.csv``: the Kaggle CSV (review, sentiment), HTML line breaks kept."""
    folder = data_dir / "imdb"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "IMDB Dataset.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "sentiment"])
        for i in range(reviews):
            text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(5 + i % 20))
            writer.writerow(
                [f'Review {i}: "{text}".<br /><br />The end.', "positive" if i % 2 else "negative"]
            )
    return []


def write_cifar10(data_dir: Path, per_batch: int = 16) -> list[str]:
    """``cifar-10-batches-py/``: five training pickles, the test pickle and the meta file."""
    folder = data_dir / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for b, name in enumerate([*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]):
        write_py2_pickle(
            folder / name,
            {
                b"batch_label": name.encode(),
                b"labels": [(b + i) % 10 for i in range(per_batch)],
                b"data": cifar_images(per_batch, offset=b),
                b"filenames": [f"{name}_{i}.png".encode() for i in range(per_batch)],
            },
        )
    names = [
        b"airplane",
        b"automobile",
        b"bird",
        b"cat",
        b"deer",
        b"dog",
        b"frog",
        b"horse",
        b"ship",
        b"truck",
    ]
    write_py2_pickle(
        folder / "batches.meta",
        {b"num_cases_per_batch": 10000, b"label_names": names, b"num_vis": 3072},
    )
    return ["data.verify=false"]  # the md5 sums are the real files'


def write_mnist(data_dir: Path, train: int = 64, test: int = 32) -> list[str]:
    """``MNIST/raw/``: the four uncompressed idx files."""
    raw = data_dir / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    write_idx(raw, "train", mnist_pixels(train, 1), [i % 10 for i in range(train)])
    write_idx(raw, "t10k", mnist_pixels(test, 2), [i % 10 for i in range(test)])
    return []


def write_imagenet(data_dir: Path) -> list[str]:
    """``imagenet/{train,val}/<class>/*.JPEG``: three classes of small JPEGs."""
    classes = ("n01", "n02", "n03")
    write_jpegs(
        data_dir / "imagenet",
        {"train": dict.fromkeys(classes, 8), "val": dict.fromkeys(classes, 4)},
    )
    return []


WRITERS: dict[str, Callable[[Path], list[str]]] = {
    "imdb": write_imdb,
    "cifar10": write_cifar10,
    "mnist": write_mnist,
    "imagenet": write_imagenet,
}


def write_real_data(option: str, data_dir: Path) -> list[str] | None:
    """Write ``data=<option>``'s files under ``data_dir``; None when there is no writer for it."""
    writer = WRITERS.get(option)
    return None if writer is None else writer(data_dir)
