"""What a dataset gives a model: the facts a model needs to size its first and last layers."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class DataSpec:
    """Shape and vocabulary of one sample, so models are built from the data, not guessed.

    ``modality`` is ``"image"`` (float tensors ``C x H x W``) or ``"tokens"`` (int64 ids of length
    ``seq_len``); ``value_range`` is ``(0.0, 1.0)`` when pixels are left unnormalised (what a
    Bernoulli VAE needs) and ``None`` when they are standardised.
    """

    modality: str
    input_shape: tuple[int, ...]
    num_classes: int
    vocab_size: int | None = None
    value_range: tuple[float, float] | None = None

    @property
    def num_features(self) -> int:
        """Elements in one sample (784 for MNIST): the width a flat model starts from."""
        return prod(self.input_shape)
