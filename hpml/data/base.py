"""Knobs every dataset shares (batch size, workers, size limit) and the loaders built from them."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from torch.utils.data import DataLoader, Dataset, Subset

from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, non_negative_int, positive_int


class HpmlDataModule(L.LightningDataModule):
    """Base of hpml's datasets: subclasses set ``train_set``/``val_set``/``test_set`` in ``setup``.

    ``limit`` caps every split at that many samples (the first ones, so runs stay comparable),
    for quick runs on real data.
    """

    def __init__(
        self,
        data_dir: str | Path = "data",
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
        download: bool = False,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.batch_size = positive_int("batch_size", batch_size)
        self.num_workers = non_negative_int("num_workers", num_workers)
        if limit is not None:
            positive_int("limit", limit)
        self.pin_memory = bool(pin_memory)
        self.download = bool(download)
        self.limit = limit
        self.seed = seed
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    @property
    def spec(self) -> DataSpec:
        """Shape facts of a sample; subclasses that learn them from files call ``setup`` first."""
        raise NotImplementedError

    def planned_spec(self) -> DataSpec:
        """The spec as far as the config tells, without reading data files.

        Validation checks the model against it before any file is opened (a missing or corrupt
        file is the run's failure, not the config's). Datasets that learn their spec from files
        override it.
        """
        return self.spec

    def _limited(self, dataset: Dataset | None, split: str) -> Dataset:
        if dataset is None:
            raise ConfigError("split", split, "a split this dataset has (call setup first)")
        if self.limit is not None and self.limit < len(dataset):  # type: ignore[arg-type]
            return Subset(dataset, range(self.limit))
        return dataset

    def _loader(self, dataset: Dataset | None, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self._limited(dataset, split),
            batch_size=self.batch_size,
            shuffle=shuffle,
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
