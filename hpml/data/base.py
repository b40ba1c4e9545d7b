"""Knobs every dataset shares (batch size, workers, size limit), the loaders built from them,
and what a dataset is, for trackers (:class:`DataDescription`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, non_negative_int, positive_int
from hpml.ranges import Count, Seed, Steps

# Bytes of file content a digest reads: all of CIFAR-10, MNIST or the IMDB CSV; of an
# ImageNet-size folder, the first files only.
CONTENT_BYTES = 256 * 2**20
DIGEST_CHARS = 8  # MLflow's advice for a dataset digest


def files_digest(root: Path, files: Iterable[Path], content_bytes: int = CONTENT_BYTES) -> str:
    """A digest of ``files``: their paths relative to ``root`` and sizes, and their content up to
    ``content_bytes`` in all, in path order, so copies digest alike wherever they lie. Past
    ``content_bytes`` a change that keeps a file's name and size goes unseen."""
    digest, budget = hashlib.sha256(), content_bytes
    for relative, path in sorted((path.relative_to(root).as_posix(), path) for path in files):
        size = path.stat().st_size
        digest.update(f"{relative}\0{size}\0".encode())
        if budget <= 0:
            continue
        with open(path, "rb") as f:
            while budget > 0 and (chunk := f.read(min(budget, 2**20))):
                digest.update(chunk)
                budget -= len(chunk)
    return digest.hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True)
class DataDescription:
    """What a run's data is, for MLflow's dataset input: read data's ``path`` and a digest of
    the files, or generated data's ``generator`` and the ``config`` that decides every sample, and
    a digest of that config. The digest is of the data, not of the slice a run takes."""

    name: str
    digest: str
    path: Path | None = None
    generator: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_files(cls, name: str, path: Path, files: Iterable[Path]) -> DataDescription:
        """Data read from ``files``, found at ``path`` (their folder, or the one file)."""
        root = path if path.is_dir() else path.parent
        return cls(name, files_digest(root, files), path=path.resolve())

    @classmethod
    def generated(cls, name: str, generator: type, config: dict[str, Any]) -> DataDescription:
        """Data that ``generator`` makes from ``config`` (JSON values) alone."""
        text = json.dumps(config, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]
        return cls(
            name,
            digest,
            generator=f"{generator.__module__}.{generator.__qualname__}",
            config=config,
        )


class HpmlDataModule(L.LightningDataModule):
    """Base of hpml's datasets: subclasses set ``train_set``/``val_set``/``test_set`` in ``setup``;
    ``limit`` caps every split at its first that many samples."""

    def __init__(
        self,
        data_dir: str | Path = "data",
        batch_size: Count = 64,
        num_workers: Steps = 0,
        pin_memory: bool = False,
        download: bool = False,
        limit: int | None = None,
        seed: Seed = 0,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.batch_size = positive_int("batch_size", batch_size)
        self.num_workers = non_negative_int("num_workers", num_workers)
        self.limit = None if limit is None else positive_int("limit", limit)
        self.pin_memory = bool(pin_memory)
        self.download = bool(download)
        self.seed = seed
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    @property
    def spec(self) -> DataSpec:
        """Shape facts of a sample; subclasses that learn them from files call ``setup`` first."""
        raise NotImplementedError

    def planned_spec(self) -> DataSpec:
        """The spec as far as the config tells, without reading data files: what validation
        checks the model against. Datasets that learn their spec from files override it."""
        return self.spec

    def description(self) -> DataDescription | None:
        """What this data is, for the run's record of it; None: a dataset that cannot say (the
        run then records no dataset). Called once the data is prepared."""
        return None

    def _loader(self, dataset: Dataset | None, split: str, shuffle: bool) -> DataLoader:
        """Shuffled from ``seed``'s own generator, so a job's data order is its seed's alone (a
        fused array's members each read their serial twin's order); under DDP Lightning's
        DistributedSampler shuffles instead."""
        if dataset is None:
            raise ConfigError("split", split, "a split this dataset has (call setup first)")
        if self.limit is not None and self.limit < len(dataset):  # type: ignore[arg-type]
            dataset = Subset(dataset, range(self.limit))
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            generator=torch.Generator().manual_seed(self.seed) if shuffle else None,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, "train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, "val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, "test", shuffle=False)
