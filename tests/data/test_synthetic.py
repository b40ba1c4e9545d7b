"""Synthetic data: deterministic, in range, sized by config, refuses impossible settings, and
carries structure a model can learn (each split's classes told apart by a model-free baseline,
the VAE's loss falling on its default data)."""

from __future__ import annotations

from functools import partial

import hydra
import lightning as L
import pytest
import torch
from torch import Tensor

from hpml.data.synthetic import SyntheticDataModule, SyntheticImages, prototypes
from hpml.errors import ConfigError
from hpml.models.nets.vae import VAE
from hpml.models.vae import VAEModule

MNIST_SHAPED = {"channels": 1, "image_size": 28, "noise": 0.0}  # as conf/data/synthetic_mnist


def split(data: SyntheticDataModule, name: str, count: int) -> tuple[Tensor, Tensor]:
    """The first ``count`` samples of split ``name``, stacked."""
    dataset = {"train": data.train_set, "val": data.val_set}[name]
    samples = [dataset[i] for i in range(count)]
    return torch.stack([x for x, _ in samples]), torch.tensor([y for _, y in samples])


def nearest_mean_accuracy(train: tuple[Tensor, Tensor], held_out: tuple[Tensor, Tensor]) -> float:
    """Accuracy on ``held_out`` of a nearest-class-mean classifier fitted on ``train``: no model,
    no training, so what it finds is structure the data carries."""
    (x, y), (x_new, y_new) = train, held_out
    x, x_new = x.flatten(1).float(), x_new.flatten(1).float()
    means = torch.stack([x[y == c].mean(0) for c in range(int(y.max()) + 1)])
    guess = torch.cdist(x_new, means).argmin(1)
    return float((guess == y_new).float().mean())


def token_counts(tokens: Tensor, vocab_size: int) -> Tensor:
    """Bag of words: how often each id occurs in each sequence."""
    counts = torch.zeros(len(tokens), vocab_size)
    return counts.scatter_add_(1, tokens, torch.ones_like(tokens, dtype=torch.float))


def test_images_are_deterministic_in_range_and_split_apart():
    data = SyntheticDataModule(train_samples=20, val_samples=10, test_samples=5, seed=3)
    data.setup()
    again = SyntheticDataModule(train_samples=20, val_samples=10, test_samples=5, seed=3)
    again.setup()
    x, y = data.train_set[7]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and 0 <= y < 10
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert torch.equal(x, again.train_set[7][0])
    assert not torch.equal(x, data.val_set[7][0])
    assert (len(data.train_set), len(data.val_set), len(data.test_set)) == (20, 10, 5)


@pytest.mark.parametrize(
    "knobs",
    [{}, MNIST_SHAPED, {"image_size": 224}, {"modality": "tokens", "num_classes": 2}],
    ids=["cifar", "mnist", "imagenet", "tokens"],
)
def test_samples_follow_their_seed_alone(knobs):
    def first(seed: int) -> Tensor:
        # setup() draws every split: the others at their least (224 px draws cost)
        data = SyntheticDataModule(
            **knobs, train_samples=4, val_samples=1, test_samples=1, seed=seed
        )
        data.setup()
        return torch.stack([data.train_set[i][0] for i in range(4)])

    assert torch.equal(first(5), first(5))
    assert not torch.equal(first(5), first(6))


def test_mnist_shaped_images_are_clean_strokes_in_the_unit_range():
    data = SyntheticDataModule(**MNIST_SHAPED, train_samples=64)
    data.setup()
    x, _ = split(data, "train", 64)
    assert x.shape == (64, 1, 28, 28) and data.spec.value_range == (0.0, 1.0)
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    # mostly background, some ink, few pixels in between (the pen's anti-aliased edge): MNIST-like
    ink, edge = float((x == 1).float().mean()), float(((x > 0) & (x < 1)).float().mean())
    assert 0.03 < ink < 0.3 and edge < ink and float((x == 0).float().mean()) > 0.6


@pytest.mark.parametrize(
    ("knobs", "least"),
    [({}, 0.6), (MNIST_SHAPED, 0.4)],
    ids=["cifar", "mnist"],
)
def test_classes_show_in_raw_pixels(knobs, least):
    """10 classes: chance is 0.1; a nearest-class-mean on pixels must beat it several times."""
    data = SyntheticDataModule(**knobs, train_samples=400, val_samples=200, seed=0)
    data.setup()
    accuracy = nearest_mean_accuracy(split(data, "train", 400), split(data, "val", 200))
    assert accuracy > least


def test_sentiment_shows_in_word_counts():
    """2 classes: chance is 0.5; counting words (no order, no model) must tell most apart."""
    data = SyntheticDataModule(modality="tokens", num_classes=2, seed=0)
    data.setup()
    (x, y), (x_new, y_new) = split(data, "train", 400), split(data, "val", 200)
    bags = token_counts(x, data.vocab_size), token_counts(x_new, data.vocab_size)
    assert nearest_mean_accuracy((bags[0], y), (bags[1], y_new)) > 0.8


def test_vae_learns_its_default_data(composed):
    """On the data `model=vae` picks, as configured, the VAE's val loss falls by at least 10%
    from epoch 1 to epoch 3: the data has structure past its mean image."""
    L.seed_everything(0)
    data = hydra.utils.instantiate(composed(["model=vae"]).data)
    model = VAEModule(VAE, data.spec, partial(torch.optim.Adam, lr=1e-3))
    losses: list[float] = []

    class Record(L.Callback):
        def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule):
            losses.append(float(trainer.callback_metrics["val/loss"]))

    trainer = L.Trainer(
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Record()],
    )
    trainer.fit(model, datamodule=data)
    assert losses[2] <= 0.9 * losses[0], losses


def test_tokens_stay_inside_the_vocabulary_and_avoid_padding():
    data = SyntheticDataModule(modality="tokens", num_classes=2, seq_len=50, vocab_size=100)
    data.setup()
    tokens = torch.stack([data.train_set[i][0] for i in range(64)])
    assert tokens.dtype == torch.long and tokens.shape == (64, 50)
    assert int(tokens.min()) >= 1 and int(tokens.max()) < 100
    assert data.spec.vocab_size == 100 and data.spec.input_shape == (50,)


def test_limit_caps_every_split():
    for placement in ("device", "loader"):
        data = SyntheticDataModule(train_samples=100, limit=10, batch_size=4, placement=placement)
        data.setup()
        for loader in (data.train_dataloader(), data.val_dataloader(), data.test_dataloader()):
            assert sum(len(y) for _, y in loader) == 10, placement


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


def test_cached_prototypes_are_shared_unchanged_by_drawing():
    """Every job of a sweep in one process draws from one cached set of class prototypes: a
    sample must not write into them, and must equal one drawn from freshly made ones."""
    data = SyntheticDataModule(image_size=224, num_classes=20, train_samples=6)
    data.setup()
    cached = prototypes(20, 3, 224, data.seed)
    before = [t.clone() for t in cached]
    drawn = [data.train_set[i] for i in range(6)]
    assert all(torch.equal(a, b) for a, b in zip(before, cached, strict=True))
    fresh = SyntheticImages(
        6, (3, 224, 224), 20, data.noise, data.seed, prototypes.__wrapped__(20, 3, 224, data.seed)
    )
    for (image, label), (again, same) in zip(drawn, (fresh[i] for i in range(6)), strict=True):
        assert label == same and torch.equal(image, again)
