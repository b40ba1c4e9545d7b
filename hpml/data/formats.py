"""The on-disk formats hpml reads, checked so a bad file is named in one line with its fix
(torchvision's own errors name neither the file nor what it should hold)."""

from __future__ import annotations

import lzma
import pickle
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader
from torchvision.datasets.utils import extract_archive

from hpml.errors import HpmlError

REDOWNLOAD = "delete it and set data.download=true"
CIFAR_BATCH = "a pickled dict with 'data' (N x 3072 uint8 pixels) and 'labels' (N class ids)"
CIFAR_META = "a pickled dict with 'label_names'"
UNREADABLE_ARCHIVE = (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error)
IDX = {2051: ("images", (28, 28)), 2049: ("labels", ())}  # MNIST's idx magic numbers


def _short(exc: BaseException) -> str:
    message = " ".join(str(exc).split(" <_io.")[0].split())[:120]  # PIL adds the file object
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def cifar_problem(path: Path, meta: bool = False) -> str | None:
    """Why ``path`` is not a CIFAR-10 python batch (or the meta file), else None."""
    try:
        with open(path, "rb") as f:
            entry: Any = pickle.load(f, encoding="latin1")
    except Exception as exc:  # any damage shows as some unpickling error
        return f"it cannot be unpickled ({_short(exc)})"
    if not isinstance(entry, dict):
        return f"it holds a {type(entry).__name__}, not a dict"
    if meta:
        return None if "label_names" in entry else "it has no 'label_names'"
    data, labels = entry.get("data"), entry.get("labels", entry.get("fine_labels"))
    if data is None or labels is None:
        return f"it has no {'data' if data is None else 'labels'!r}"
    shape = np.shape(data)
    if len(shape) != 2 or shape[1] != 3072:
        return f"its 'data' has shape {shape}, not N x 3072"
    if len(labels) != shape[0]:
        return f"it has {shape[0]} images but {len(labels)} labels"
    return None


def first_bad_cifar(folder: Path, batches: list[str], meta: str) -> HpmlError | None:
    """A one-line error for the first file in ``folder`` that is not what CIFAR-10 holds."""
    for name in [*batches, meta]:
        if (problem := cifar_problem(folder / name, meta=name == meta)) is not None:
            expected = CIFAR_META if name == meta else CIFAR_BATCH
            return HpmlError(
                f"{folder / name} is not a CIFAR-10 python batch: {problem}; "
                f"expected {expected}: {REDOWNLOAD}"
            )
    return None


def idx_problem(path: Path) -> str | None:
    """Why ``path`` is not an MNIST idx file of 28x28 images or of labels, else None."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(16)
    if len(head) < 8:
        return f"it has {size} bytes, fewer than an idx header"
    magic, count = struct.unpack(">II", head[:8])
    if magic not in IDX:
        return f"its magic number is {magic}, not 2051 (images) or 2049 (labels)"
    what, item = IDX[magic]
    header = 8 + 4 * len(item)
    if item and (len(head) < header or struct.unpack(">II", head[8:16]) != item):
        dims = struct.unpack(">II", head[8:16]) if len(head) >= header else "missing"
        return f"its images are {dims}, not 28x28"
    expected = header + count * int(np.prod(item, dtype=np.int64))
    if size != expected:
        state = "truncated" if size < expected else "longer than its header says"
        return (
            f"it is {state}: its header promises {count} {what} ({expected} bytes), "
            f"the file has {size} bytes"
        )
    return None


def check_mnist(folder: Path, files: tuple[str, ...]) -> None:
    """Raise a one-line HpmlError naming the first MNIST idx file that is malformed."""
    counts: dict[str, tuple[int, Path]] = {}
    for name in files:
        path = folder / name
        problem = idx_problem(path)
        if problem is not None:
            raise HpmlError(
                f"{path} is not a valid MNIST idx file: {problem}; expected the "
                f"uncompressed idx file (big-endian header, uint8 data): {REDOWNLOAD}"
            )
        with open(path, "rb") as f:
            count = struct.unpack(">I", f.read(8)[4:])[0]
        split = name.split("-")[0]
        if split in counts and counts[split][0] != count:
            other_count, other = counts[split]
            raise HpmlError(
                f"{path} holds {count} entries but {other} holds {other_count}: the "
                f"images and labels of a split must match; {REDOWNLOAD}"
            )
        counts[split] = (count, path)


UNREADABLE_IMAGE = (OSError, ValueError, Image.DecompressionBombError)


def _unreadable_image(path: str | Path, exc: BaseException) -> HpmlError:
    return HpmlError(
        f"{path} is not a readable image ({_short(exc)}): expected a JPEG or PNG "
        "file; replace or delete it"
    )


def load_image(path: str) -> Image.Image:
    """torchvision's loader (RGB), with an unreadable file named in one line."""
    try:
        return default_loader(path)
    except UNREADABLE_IMAGE as exc:
        raise _unreadable_image(path, exc) from None


def image_dimensions(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of the image at ``path``, from its header alone (no pixel is
    decoded), with an unreadable file named in one line as :func:`load_image` names it."""
    try:
        with Image.open(path) as image:
            return image.size
    except UNREADABLE_IMAGE as exc:
        raise _unreadable_image(path, exc) from None


def empty_class_folder(root: Path) -> Path | None:
    """The first ``<split>/<class>`` folder under ``root`` without an image file, if any."""
    for split in ("train", "val"):
        base = root / split
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            images = (p for p in folder.rglob("*") if p.suffix.lower() in IMG_EXTENSIONS)
            if next(images, None) is None:
                return folder
    return None


def extract(archive: Path, root: Path, expected: str) -> None:
    """Extract ``archive`` into ``root`` with torchvision, a damaged archive (truncated, not
    gzip, not tar) named in one line with what it should be, ``expected``."""
    try:
        extract_archive(str(archive), str(root))
    except (*UNREADABLE_ARCHIVE, lzma.LZMAError) as exc:
        raise HpmlError(
            f"{archive} cannot be extracted ({_short(exc)}): expected {expected}; {REDOWNLOAD}"
        ) from None
