"""Knobs every dataset shares (batch size, workers, size limit), the loaders built from them,
and what a dataset is, for trackers (:class:`DataDescription`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from hpml.data.placement import IN_MEMORY, PLACEMENTS, DeviceBatches, Loading, Tensors, choose
from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, one_of, positive_int
from hpml.ranges import Count, Range, Seed

# worker processes: a number, or auto (chosen for the trainer's devices)
Workers = Annotated[int | Literal["auto"], Range(ge=0, auto="chosen for the trainer's devices")]

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
        digest.update(f"{relative}\0{path.stat().st_size}\0".encode())
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
    ``limit`` caps every split at its first that many samples. Data a subclass can hold as
    tensors (:meth:`in_memory`) is read through the ``device`` or ``pinned`` placement, the rest
    through a DataLoader (:mod:`hpml.data.placement`).

    Args:
        placement: where the samples live while the run reads them: ``device``, ``pinned``,
            ``loader`` or ``auto`` (:func:`~hpml.data.placement.choose`).
        num_workers: the DataLoader's worker processes; ``auto`` chooses for the trainer's
            devices (:func:`~hpml.data.placement.auto_workers`).
        pin_memory: whether the DataLoader pins its batches; ``auto``: on a CUDA trainer.
        prefetch_factor: batches each worker loads ahead.
    """

    def __init__(
        self,
        data_dir: str | Path = "data",
        batch_size: Count = 64,
        num_workers: Workers = "auto",
        pin_memory: bool | Literal["auto"] = "auto",
        prefetch_factor: Count = 2,
        placement: Literal["auto", "device", "pinned", "loader"] = "auto",
        download: bool = False,
        limit: int | None = None,
        seed: Seed = 0,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.batch_size = positive_int("batch_size", batch_size)
        if num_workers != "auto" and (
            isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0
        ):
            raise ConfigError("num_workers", num_workers, "an integer >= 0, or auto")
        self.num_workers = num_workers
        self.limit = None if limit is None else positive_int("limit", limit)
        self.pin_memory = pin_memory if pin_memory == "auto" else bool(pin_memory)
        self.prefetch_factor = positive_int("prefetch_factor", prefetch_factor)
        self.placement = one_of("placement", placement, PLACEMENTS)
        self.download = bool(download)
        self.seed = seed
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self._loading: Loading | None = None
        self._held: dict[str, DeviceBatches] = {}

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

    def in_memory_problem(self) -> str | None:
        """Why this data cannot be held as tensors (None: it can, :meth:`in_memory` gives
        them); known from the config, before any file is read."""
        return f"{type(self).__name__} reads its samples one at a time"

    def in_memory(self, split: str) -> Tensors:
        """Split ``split`` (set up) as tensors, for the ``device`` and ``pinned`` placements: a
        ``TensorDataset``'s own; other datasets that :meth:`in_memory_problem` lets through
        override it."""
        dataset = getattr(self, f"{split}_set")
        if not isinstance(dataset, TensorDataset):
            raise NotImplementedError(f"{type(self).__name__} holds no {split} split as tensors")
        inputs, targets = dataset.tensors
        return Tensors(inputs, targets)

    def placement_problem(self, accelerator: str) -> ConfigError | None:
        """What refuses ``placement`` on a trainer of ``accelerator`` (Lightning's registry
        name), or None: data read per sample held as tensors, a loader knob beside a placement
        that reads no loader, pinned memory off CUDA."""
        placement, problem = self.placement, self.in_memory_problem()
        knobs = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        loader_knob = next(
            (f"data.{key}={value}" for key, value in knobs.items() if value not in ("auto", 0)),
            None,
        )
        if placement in IN_MEMORY and problem is not None:
            why = problem
        elif placement in IN_MEMORY and loader_knob is not None:
            why = f"{loader_knob} feeds a DataLoader, which the {placement} placement has none of"
        elif placement == "pinned" and accelerator != "cuda":
            where = f"this run trains on {accelerator}"
            if not torch.cuda.is_available():
                where = "this machine has no CUDA device"
            why = f"pinned memory serves copies to a CUDA device, and {where}"
        else:
            return None
        valid = [p for p in PLACEMENTS if p != placement]
        return ConfigError("placement", placement, f"{', '.join(valid)}: {why}")

    def loading(self) -> Loading:
        """The placement and loader knobs of this run, chosen once for the trainer's device
        (the CPU outside a trainer) and logged as its ``data.chosen.*`` params."""
        if self._loading is not None:
            return self._loading
        trainer = self.trainer
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        self._loading = choose(
            self.placement,
            self.num_workers,
            self.pin_memory,
            self.prefetch_factor,
            self.in_memory_problem() is None,
            device,
            devices=trainer.num_devices if trainer is not None else 1,
        )
        if self._loading.placement == "pinned" and device.type != "cuda":
            raise ConfigError("placement", "pinned", f"device, loader or auto on {device.type}")
        for logger in trainer.loggers if trainer is not None else ():
            logger.log_hyperparams(self._loading.params())
        return self._loading

    def _loader(self, dataset: Dataset | None, split: str, shuffle: bool) -> Iterable[Any]:
        """Shuffled from ``seed``'s own generator, so a job's data order is its seed's alone (a
        fused array's members each read their serial twin's order); under DDP Lightning's
        DistributedSampler shuffles a DataLoader instead, and held batches are sharded."""
        if dataset is None:
            raise ConfigError("split", split, "a split this dataset has (call setup first)")
        loading = self.loading()
        if loading.placement in IN_MEMORY:
            if split not in self._held:
                trainer = self.trainer
                self._held[split] = DeviceBatches(
                    self.in_memory(split).head(self.limit),
                    self.batch_size,
                    trainer.strategy.root_device if trainer is not None else torch.device("cpu"),
                    shuffle,
                    pinned=loading.placement == "pinned",
                    rank=trainer.global_rank if trainer is not None else 0,
                    world=trainer.world_size if trainer is not None else 1,
                    seed=self.seed,
                )
            return self._held[split]
        if self.limit is not None and self.limit < len(dataset):  # type: ignore[arg-type]
            dataset = Subset(dataset, range(self.limit))
        workers = loading.num_workers
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            generator=torch.Generator().manual_seed(self.seed) if shuffle else None,
            num_workers=workers,
            pin_memory=loading.pin_memory,
            persistent_workers=workers > 0,
            prefetch_factor=loading.prefetch_factor if workers > 0 else None,
        )

    def train_dataloader(self) -> Iterable[Any]:
        return self._loader(self.train_set, "train", shuffle=True)

    def val_dataloader(self) -> Iterable[Any]:
        return self._loader(self.val_set, "val", shuffle=False)

    def test_dataloader(self) -> Iterable[Any]:
        return self._loader(self.test_set, "test", shuffle=False)
