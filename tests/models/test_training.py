"""Each model family learns the synthetic data: loss falls and accuracy beats chance. VGG11's is
proved through ``hpml.train`` by tests/models/test_defaults_learn.py, with a higher bar."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch

from hpml.data.synthetic import SyntheticDataModule
from hpml.errors import IncompatibleError
from hpml.models.classifier import TextClassifier
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vae import VAE
from hpml.models.vae import VAEModule


def fit(model: L.LightningModule, data: SyntheticDataModule, epochs: int) -> dict[str, list]:
    """Train and return the per-epoch history of the logged metrics."""
    history: dict[str, list] = {}

    class Record(L.Callback):
        def on_validation_epoch_end(self, trainer, pl_module):
            for name, value in trainer.callback_metrics.items():
                history.setdefault(name, []).append(float(value))

    trainer = L.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Record()],
    )
    trainer.fit(model, datamodule=data)
    return history


def test_lstm_learns_synthetic_tokens():
    L.seed_everything(0)
    data = SyntheticDataModule(
        modality="tokens",
        num_classes=2,
        seq_len=32,
        vocab_size=500,
        signal=0.3,  # dense sentiment words: a test of learning, not of the default's ceiling
        train_samples=1024,
        val_samples=256,
        batch_size=32,
    )
    net = partial(LSTMClassifier, embedding_dim=32, hidden_size=32, num_layers=2)
    model = TextClassifier(net, data.spec, partial(torch.optim.Adam, lr=3e-3))
    history = fit(model, data, epochs=3)
    assert history["train/loss"][-1] < history["train/loss"][0]
    assert history["val/acc"][-1] > 0.75  # 2 classes: chance is 0.5


def test_vae_reconstruction_and_kl_are_logged_and_loss_falls():
    L.seed_everything(0)
    # the VAE's own synthetic data (conf/data/synthetic_mnist.yaml): clean strokes, no pixel noise
    data = SyntheticDataModule(
        channels=1, image_size=28, noise=0.0, train_samples=512, batch_size=64
    )
    model = VAEModule(VAE, data.spec, partial(torch.optim.Adam, lr=1e-3))
    history = fit(model, data, epochs=3)
    assert history["val/loss"][-1] < history["val/loss"][0]
    for bce, kld, loss in zip(
        history["val/bce"], history["val/kld"], history["val/loss"], strict=True
    ):
        assert loss == pytest.approx(bce + kld, rel=1e-5)
        assert kld >= 0


def test_vae_refuses_normalised_pixels():
    spec = SyntheticDataModule(channels=1, image_size=28).spec
    normalised = type(spec)(spec.modality, spec.input_shape, spec.num_classes)
    with pytest.raises(IncompatibleError, match=r"needs pixels in \[0, 1\]"):
        VAEModule(VAE, normalised, partial(torch.optim.Adam, lr=1e-3))
