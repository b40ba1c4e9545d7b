"""IMDB 50k movie reviews (binary sentiment) as fixed-length, left-padded token id sequences, read
from the Kaggle-style CSV (``review``, ``sentiment``); the encoded tensors are cached under
``data_dir/.cache``, keyed by the file and every knob that changes them."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import pickle
import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.error import URLError

import torch
from torch.utils.data import TensorDataset
from torchvision.datasets.utils import download_url

from hpml.data.base import DataDescription, HpmlDataModule
from hpml.data.formats import REDOWNLOAD, extract
from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, DatasetNotFoundError, HpmlError, positive_int

log = logging.getLogger(__name__)

URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
MD5 = "7c2ac02c03563afcf9b574c7e56c153a"
ARCHIVE = "the gzipped tar of the Stanford aclImdb reviews (aclImdb/{train,test}/{pos,neg}/*.txt)"
LABELS = {"negative": 0, "positive": 1}
SPECIALS = ("<pad>", "<unk>")
PAD, UNK = 0, 1
WORD = re.compile(r"[a-z0-9']+")
CACHE_FORMAT = 1  # bump when the encoding changes, so old caches are not reused


def tokenize(text: str) -> list[str]:
    """Lowercase words; ``<br />`` is IMDB's line break, not a word."""
    return WORD.findall(text.lower().replace("<br />", " "))


def convert_aclimdb(root: str | Path, csv_path: str | Path) -> int:
    """Write the Stanford ``root/aclImdb/{train,test}/{pos,neg}/*.txt`` files as one CSV, in
    sorted order so it is the same on every machine (``unsup/`` has no labels); return the number
    of reviews written."""
    base, csv_path = Path(root) / "aclImdb", Path(csv_path)
    folders = [
        (base / half / folder, label)
        for half in ("train", "test")
        for folder, label in (("pos", "positive"), ("neg", "negative"))
    ]
    for folder, _ in folders:
        if not folder.is_dir():
            raise DatasetNotFoundError("aclImdb", folder, f"extract {URL} into {root}")
    partial = csv_path.with_name(csv_path.name + ".partial")
    count = 0
    with open(partial, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["review", "sentiment"])
        for folder, label in folders:
            for path in sorted(folder.glob("*.txt")):
                writer.writerow([_review(path), label])
                count += 1
    os.replace(partial, csv_path)  # a half-written CSV must never look like a finished one
    return count


def _review(path: Path) -> str:
    """One aclImdb review file's text; a file that is not UTF-8 is named in one line."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise HpmlError(
            f"{path} is not UTF-8 text ({err.reason} at byte {err.start}): expected one aclImdb "
            f"review; delete the aclImdb folder beside it and set data.download=true"
        ) from None


def read_reviews(path: Path) -> tuple[list[str], list[int]]:
    """Reviews and 0/1 labels from the CSV; any format problem is one line naming the file."""
    reviews: list[str] = []
    labels: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            missing = [c for c in ("review", "sentiment") if c not in columns]
            if missing:
                raise HpmlError(
                    f"{path}: missing column(s) {', '.join(missing)} "
                    f"(header is {columns}; expected review,sentiment)"
                )
            for row in reader:
                review, sentiment = row["review"], row["sentiment"]
                if review is None or sentiment is None:
                    raise HpmlError(f"{path}, line {reader.line_num}: fewer fields than the header")
                label = LABELS.get(sentiment.strip().lower())
                if label is None:
                    raise HpmlError(
                        f"{path}, line {reader.line_num}: sentiment {sentiment!r} is neither "
                        "'positive' nor 'negative'"
                    )
                reviews.append(review)
                labels.append(label)
    except UnicodeDecodeError as err:
        raise HpmlError(f"{path} is not UTF-8 text: {err}") from err
    except csv.Error as err:
        raise HpmlError(f"{path} is not a readable CSV: {err}") from err
    if not reviews:
        raise HpmlError(f"{path} holds no reviews")
    return reviews, labels


def _split(value: Any) -> tuple[float, float, float]:
    expected = "three positive fractions [train, val, test] that sum to 1"
    try:
        parts = tuple(value)
    except TypeError:
        raise ConfigError("split", value, expected) from None
    if (
        len(parts) != 3
        or any(isinstance(p, bool) or not isinstance(p, int | float) or p <= 0 for p in parts)
        or abs(sum(parts) - 1) > 1e-6
    ):
        raise ConfigError("split", list(parts), expected)
    return float(parts[0]), float(parts[1]), float(parts[2])


class IMDBDataModule(HpmlDataModule):
    """IMDB reviews as ``seq_len`` token ids, left-padded with 0 so a recurrent model's final
    hidden state sits right after the last real word.

    The vocabulary (id 0 ``<pad>``, id 1 ``<unk>``, then words by falling frequency, ties by word)
    is built from the training split only, so val/test words never leak into it.

    Args:
        csv_name: the CSV's file name under ``data_dir``.
        vocab_size: the vocabulary's length, the two specials included.
        min_freq: fewest occurrences in the training split that make a word part of it.
        split: the shares of train, val and test, summing to 1.
        cache: keep the encoded tensors under ``data_dir/.cache``.
        **kwargs: :class:`~hpml.data.base.HpmlDataModule`'s (batch size, seed, ...).
    """

    HINT = (
        "put the Kaggle 'IMDB Dataset of 50K Movie Reviews' CSV (columns review,sentiment) there, "
        "or set data.download=true to fetch and convert the Stanford aclImdb archive"
    )

    def __init__(
        self,
        csv_name: str = "IMDB Dataset.csv",
        seq_len: int = 200,
        vocab_size: int = 20000,
        min_freq: int = 1,
        split: Any = (0.8, 0.1, 0.1),
        cache: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.csv_name = str(csv_name)
        self.seq_len = positive_int("seq_len", seq_len)
        if positive_int("vocab_size", vocab_size) <= len(SPECIALS):
            raise ConfigError("vocab_size", vocab_size, "at least 3 (two specials and a word)")
        self.vocab_size = vocab_size
        self.min_freq = positive_int("min_freq", min_freq)
        self.split = _split(split)
        self.cache = bool(cache)
        self.vocab: list[str] | None = None

    @property
    def csv_path(self) -> Path:
        return self.data_dir / self.csv_name

    @property
    def spec(self) -> DataSpec:
        if self.vocab is None:
            self.setup("fit")
        assert self.vocab is not None
        return DataSpec("tokens", (self.seq_len,), 2, vocab_size=len(self.vocab))

    def planned_spec(self) -> DataSpec:
        """Sequences of ``seq_len`` ids; the vocabulary is at most ``vocab_size`` long."""
        return DataSpec("tokens", (self.seq_len,), 2, vocab_size=self.vocab_size)

    def in_memory_problem(self) -> None:
        """None: the encoded reviews are tensors already."""
        return None

    def description(self) -> DataDescription:
        """The CSV, by name, size and content; how it is split and encoded are params."""
        return DataDescription.of_files("imdb", self.csv_path, [self.csv_path])

    def prepare_data(self) -> None:
        if self.csv_path.is_file():
            return
        if not self.download:
            raise DatasetNotFoundError("IMDB CSV", self.csv_path, self.HINT)
        log.info("downloading %s", URL)
        archive = self.data_dir / Path(URL).name
        try:  # an archive already there is kept if its md5 matches, fetched again if not
            download_url(URL, self.data_dir, md5=MD5)
        except (URLError, OSError) as err:
            raise HpmlError(f"downloading {URL} failed: {' '.join(str(err).split())}") from err
        except RuntimeError as err:  # torchvision's "File not found or corrupted."
            raise HpmlError(
                f"{archive}, downloaded from {URL}, fails its md5 check (expected {MD5}): "
                f"expected {ARCHIVE}; {REDOWNLOAD}"
            ) from err
        extract(archive, self.data_dir, ARCHIVE)
        count = convert_aclimdb(self.data_dir, self.csv_path)
        log.info("wrote %d reviews to %s", count, self.csv_path)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if not self.csv_path.is_file():
            raise DatasetNotFoundError("IMDB CSV", self.csv_path, self.HINT)
        cache_path = self._cache_path()
        data = self._load_cache(cache_path) if self.cache else None
        if data is None:
            log.info("IMDB cache miss: tokenising %s", self.csv_path)
            data = self._encode()
            if self.cache:
                self._save_cache(cache_path, data)
        self.vocab = data["vocab"]
        self.train_set = TensorDataset(*data["train"])
        self.val_set = TensorDataset(*data["val"])
        self.test_set = TensorDataset(*data["test"])

    def _cache_path(self) -> Path:
        stat = self.csv_path.stat()
        key = [
            CACHE_FORMAT,
            self.csv_name,
            stat.st_size,
            stat.st_mtime_ns,
            self.seq_len,
            self.vocab_size,
            self.min_freq,
            self.split,
            self.seed,
        ]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
        return self.data_dir / ".cache" / f"imdb-{digest}.pt"

    def _load_cache(self, path: Path) -> dict[str, Any] | None:
        if not path.is_file():
            return None
        try:
            data = torch.load(path, weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
            log.warning("IMDB cache %s is unreadable (%s); rebuilding it", path, err)
            return None
        log.info("IMDB cache hit: %s", path)
        return data

    def _save_cache(self, path: Path, data: dict[str, Any]) -> None:
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(data, partial)
            os.replace(partial, path)  # ranks that cache at once never read a half-written file
        except OSError as err:
            log.warning("could not write IMDB cache %s (%s); next run tokenises again", path, err)

    def _encode(self) -> dict[str, Any]:
        """Tokenise once, build the train-only vocabulary, and encode every split."""
        reviews, labels = read_reviews(self.csv_path)
        n = len(reviews)
        n_train, n_val = round(self.split[0] * n), round(self.split[1] * n)
        if min(n_train, n_val, n - n_train - n_val) < 1:
            raise HpmlError(f"{self.csv_path} has {n} reviews: too few for split={self.split}")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
        in_train = torch.zeros(n, dtype=torch.bool)
        in_train[order[:n_train]] = True
        train_rows = in_train.tolist()

        # Words get provisional ids in order of appearance; only the first seq_len per review
        # are kept (-1 = padding), which bounds memory at n x seq_len whatever the review lengths.
        first_seen: dict[str, int] = {}
        counts: Counter[int] = Counter()
        heads = torch.full((n, self.seq_len), -1, dtype=torch.long)
        for i, review in enumerate(reviews):
            ids = [first_seen.setdefault(w, len(first_seen)) for w in tokenize(review)]
            if train_rows[i]:
                counts.update(ids)
            head = ids[: self.seq_len]
            if head:
                heads[i, self.seq_len - len(head) :] = torch.tensor(head)

        kept = [w for w, i in first_seen.items() if counts[i] >= self.min_freq]
        kept.sort(key=lambda w: (-counts[first_seen[w]], w))
        words = kept[: self.vocab_size - len(SPECIALS)]
        lookup = torch.full((len(first_seen) + 1,), UNK, dtype=torch.long)
        provisional = torch.tensor([first_seen[w] for w in words], dtype=torch.long)
        lookup[provisional] = torch.arange(len(words)) + len(SPECIALS)
        lookup[-1] = PAD
        heads[heads < 0] = len(first_seen)
        x, y = lookup[heads], torch.tensor(labels)

        parts = {"train": order[:n_train], "val": order[n_train : n_train + n_val]}
        parts["test"] = order[n_train + n_val :]
        return {"vocab": [*SPECIALS, *words]} | {name: (x[i], y[i]) for name, i in parts.items()}
