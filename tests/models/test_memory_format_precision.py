"""model.channels_last and trainer=bf16 (bf16-mixed) train on CPU: the layout and dtype they
promise reach the net, and the loss stays finite."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
from torch import nn

from hpml.data.synthetic import SyntheticDataModule
from hpml.errors import ConfigError
from hpml.models.classifier import ImageClassifier, TextClassifier
from hpml.models.nets.lstm import LSTMClassifier


def tiny_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )


class Seen(L.Callback):
    """The training batches' memory layout and the dtype of the first conv's output."""

    def __init__(self) -> None:
        self.layouts: list[bool] = []
        self.conv_dtypes: list[torch.dtype] = []

    def on_train_start(self, trainer, pl_module):
        pl_module.net[0].register_forward_hook(
            lambda m, args, out: self.conv_dtypes.append(out.dtype)
        )
        pl_module.net[0].register_forward_pre_hook(
            lambda m, args: self.layouts.append(
                args[0].is_contiguous(memory_format=torch.channels_last)
            )
        )


@pytest.mark.parametrize(
    ("channels_last", "precision", "dtype"),
    [(True, "32-true", torch.float32), (False, "bf16-mixed", torch.bfloat16)],
)
def test_channels_last_and_cpu_bf16_train(channels_last, precision, dtype):
    data = SyntheticDataModule(train_samples=32, val_samples=16, batch_size=8)
    model = ImageClassifier(
        tiny_cnn, data.spec, partial(torch.optim.SGD, lr=0.01), channels_last=channels_last
    )
    seen = Seen()
    trainer = L.Trainer(
        accelerator="cpu",
        precision=precision,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[seen],
    )
    trainer.fit(model, datamodule=data)
    assert seen.layouts and all(layout == channels_last for layout in seen.layouts[:4])
    assert model.net[0].weight.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert set(seen.conv_dtypes[:4]) == {dtype}
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


def test_channels_last_on_tokens_is_refused():
    data = SyntheticDataModule(modality="tokens", num_classes=2, seq_len=8, vocab_size=50)
    with pytest.raises(ConfigError, match=r"channels_last=True is invalid.*images only"):
        TextClassifier(
            partial(LSTMClassifier, embedding_dim=8, hidden_size=8),
            data.spec,
            partial(torch.optim.SGD, lr=0.01),
            channels_last=True,
        )
