"""Offline data with a learnable signal: the embedded default, so every model runs anywhere."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from hpml.data.base import DataDescription, HpmlDataModule
from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, positive_int

MODALITIES = ("image", "tokens")


class SyntheticImages(Dataset):
    """Images in [0, 1]: a fixed smooth template per class plus per-sample noise.

    Sample ``i`` is generated from seed ``seed + i``, so a split is the same on every run and in
    every worker, yet costs real CPU time per item like a decoded dataset would.
    """

    def __init__(
        self,
        size: int,
        shape: tuple[int, int, int],
        num_classes: int,
        noise: float,
        seed: int,
        templates: Tensor,
    ) -> None:
        self.size, self.shape, self.num_classes = size, shape, num_classes
        self.noise, self.seed, self.templates = noise, seed, templates

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed + index)
        label = int(torch.randint(self.num_classes, (), generator=generator))
        noise = torch.randn(self.shape, generator=generator) * self.noise
        return (self.templates[label] + noise).clamp_(0.0, 1.0), label


class SyntheticTokens(Dataset):
    """Token sequences whose class is told by how often tokens of that class's subset occur."""

    def __init__(
        self, size: int, seq_len: int, vocab_size: int, num_classes: int, signal: float, seed: int
    ) -> None:
        self.size, self.seq_len, self.vocab_size = size, seq_len, vocab_size
        self.num_classes, self.signal, self.seed = num_classes, signal, seed
        # id 0 is padding; each class owns a disjoint slice of the remaining ids
        self.slice = (vocab_size - 1) // (2 * num_classes)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed + index)
        label = int(torch.randint(self.num_classes, (), generator=generator))
        tokens = torch.randint(1, self.vocab_size, (self.seq_len,), generator=generator)
        marked = torch.rand(self.seq_len, generator=generator) < self.signal
        start = 1 + label * self.slice
        own = torch.randint(start, start + self.slice, (self.seq_len,), generator=generator)
        return torch.where(marked, own, tokens), label


class SyntheticDataModule(HpmlDataModule):
    """Images (``C x H x W``) or token sequences, sized by config; no files, no network."""

    def __init__(
        self,
        modality: str = "image",
        num_classes: int = 10,
        channels: int = 3,
        image_size: int = 32,
        seq_len: int = 64,
        vocab_size: int = 2000,
        noise: float = 0.3,
        signal: float = 0.3,
        train_samples: int = 1024,
        val_samples: int = 256,
        test_samples: int = 256,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if modality not in MODALITIES:
            raise ConfigError("modality", modality, f"one of {', '.join(MODALITIES)}")
        self.modality = modality
        self.num_classes = positive_int("num_classes", num_classes)
        self.channels = positive_int("channels", channels)
        self.image_size = positive_int("image_size", image_size)
        self.seq_len = positive_int("seq_len", seq_len)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        if modality == "tokens" and vocab_size < 2 * num_classes + 1:
            raise ConfigError("vocab_size", vocab_size, f"at least {2 * num_classes + 1}")
        self.noise, self.signal = float(noise), float(signal)
        self.sizes = {
            "train": positive_int("train_samples", train_samples),
            "val": positive_int("val_samples", val_samples),
            "test": positive_int("test_samples", test_samples),
        }

    @property
    def spec(self) -> DataSpec:
        if self.modality == "tokens":
            return DataSpec("tokens", (self.seq_len,), self.num_classes, self.vocab_size)
        shape = (self.channels, self.image_size, self.image_size)
        return DataSpec("image", shape, self.num_classes, value_range=(0.0, 1.0))

    def description(self) -> DataDescription:
        """Generated data, so described by what decides its samples: the knobs of its modality,
        the split sizes and the seed; batch size, workers and ``limit`` change none of them."""
        if self.modality == "tokens":
            knobs = {"seq_len": self.seq_len, "vocab_size": self.vocab_size, "signal": self.signal}
        else:
            knobs = {"channels": self.channels, "image_size": self.image_size, "noise": self.noise}
        sizes = {f"{split}_samples": size for split, size in self.sizes.items()}
        config = {"modality": self.modality, "num_classes": self.num_classes, **knobs, **sizes}
        config["seed"] = self.seed
        return DataDescription.generated(f"synthetic_{self.modality}", type(self), config)

    def _templates(self) -> Tensor:
        """Smooth class templates: coarse random grids upsampled, so convolutions can learn them."""
        generator = torch.Generator().manual_seed(self.seed)
        coarse = torch.rand(self.num_classes, self.channels, 4, 4, generator=generator)
        size = (self.image_size, self.image_size)
        return torch.nn.functional.interpolate(coarse, size=size, mode="bilinear")

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        offsets = {"train": 0, "val": 1_000_000, "test": 2_000_000}
        if self.modality == "tokens":
            splits = {
                name: SyntheticTokens(
                    size,
                    self.seq_len,
                    self.vocab_size,
                    self.num_classes,
                    self.signal,
                    self.seed + offsets[name],
                )
                for name, size in self.sizes.items()
            }
        else:
            templates = self._templates()
            shape = (self.channels, self.image_size, self.image_size)
            splits = {
                name: SyntheticImages(
                    size, shape, self.num_classes, self.noise, self.seed + offsets[name], templates
                )
                for name, size in self.sizes.items()
            }
        self.train_set, self.val_set, self.test_set = splits["train"], splits["val"], splits["test"]
