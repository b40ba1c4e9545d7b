"""Synthetic data: deterministic, in range, sized by config, and refuses impossible settings."""

from __future__ import annotations

import pytest
import torch

from hpml.data.synthetic import SyntheticDataModule
from hpml.errors import ConfigError


def test_images_are_deterministic_in_range_and_split_apart():
    data = SyntheticDataModule(train_samples=20, val_samples=10, test_samples=5, seed=3)
    data.setup()
    again = SyntheticDataModule(train_samples=20, val_samples=10, test_samples=5, seed=3)
    again.setup()
    x, y = data.train_set[7]
    assert x.shape == (3, 32, 32) and 0 <= y < 10
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert torch.equal(x, again.train_set[7][0])
    assert not torch.equal(x, data.val_set[7][0])
    assert (len(data.train_set), len(data.val_set), len(data.test_set)) == (20, 10, 5)


def test_tokens_stay_inside_the_vocabulary_and_avoid_padding():
    data = SyntheticDataModule(modality="tokens", num_classes=2, seq_len=50, vocab_size=100)
    data.setup()
    tokens = torch.stack([data.train_set[i][0] for i in range(64)])
    assert tokens.dtype == torch.long and tokens.shape == (64, 50)
    assert int(tokens.min()) >= 1 and int(tokens.max()) < 100
    assert data.spec.vocab_size == 100 and data.spec.input_shape == (50,)


def test_limit_caps_every_split():
    data = SyntheticDataModule(train_samples=100, limit=10, batch_size=4)
    data.setup()
    assert len(data.train_dataloader().dataset) == 10
    assert len(data.test_dataloader().dataset) == 10


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": -1}, "batch_size=-1 is invalid: expected a positive integer"),
        ({"batch_size": 0}, "batch_size=0 is invalid"),
        ({"num_workers": -2}, "num_workers=-2 is invalid: expected an integer >= 0"),
        ({"modality": "audio"}, "modality='audio' is invalid: expected one of image, tokens"),
        ({"modality": "tokens", "vocab_size": 4}, "vocab_size=4 is invalid: expected at least 21"),
    ],
)
def test_bad_settings_name_the_value_and_what_is_valid(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SyntheticDataModule(**kwargs)
