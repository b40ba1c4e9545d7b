"""Network shapes and parameter counts against hand counts from the architectures' definitions."""

from __future__ import annotations

import pytest
import torch
import torchvision
from hydra.utils import instantiate

from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, IncompatibleError
from hpml.models.classifier import ImageClassifier, TextClassifier
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vae import VAE
from hpml.models.nets.vgg import CONFIGS, vgg

CIFAR = DataSpec("image", (3, 32, 32), 10, value_range=(0.0, 1.0))


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def vgg_cifar_params(depth: int, classes: int = 10) -> int:
    """Per conv: 3x3 weights + bias + BatchNorm scale and shift; then Linear(512, classes)."""
    total, channels = 0, 3
    for width in CONFIGS[depth]:
        if width != "M":
            total += 9 * channels * width + width + 2 * width
            channels = width
    return total + 512 * classes + classes


@pytest.mark.parametrize("depth", [11, 13, 16, 19])
def test_cifar_vgg_matches_hand_count_and_maps_32px_to_classes(depth):
    net = vgg(depth)
    assert sum(p.numel() for p in net.parameters()) == vgg_cifar_params(depth)
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_vgg11_cifar_is_the_studys_model():
    assert vgg_cifar_params(11) == 9_231_114  # 36.92 MB of fp32 weights, as study 1 quantised


def test_imagenet_layout_is_torchvisions():
    ours = vgg(16, num_classes=1000, layout="imagenet", batch_norm=False)
    theirs = torchvision.models.vgg16(weights=None)
    assert [p.shape for p in ours.parameters()] == [p.shape for p in theirs.parameters()]


def test_bad_vgg_depth_and_layout_name_the_valid_ones():
    with pytest.raises(ConfigError, match="depth=12 is invalid: expected one of 11, 13, 16, 19"):
        vgg(12)
    with pytest.raises(ConfigError, match="layout='tiny' is invalid: expected one of cifar"):
        vgg(11, layout="tiny")


def lstm_params(vocab, emb, hidden, layers, classes, directions=1):
    """Embedding + per layer and direction 4 gates x (input + hidden weights, two biases) + head."""
    total = vocab * emb
    for layer in range(layers):
        inputs = emb if layer == 0 else hidden * directions
        total += directions * 4 * hidden * (inputs + hidden + 2)
    return total + hidden * directions * classes + classes


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_matches_hand_count(bidirectional):
    net = LSTMClassifier(
        500, 2, embedding_dim=32, hidden_size=16, num_layers=3, bidirectional=bidirectional
    )
    expected = lstm_params(500, 32, 16, 3, 2, 2 if bidirectional else 1)
    assert sum(p.numel() for p in net.parameters()) == expected
    assert net(torch.randint(0, 500, (4, 7))).shape == (4, 2)


def test_imdb_lstm_experiment_has_the_studys_scale(composed):
    cfg = composed(["experiment=imdb_lstm"])
    spec = DataSpec("tokens", (cfg.data.seq_len,), 2, vocab_size=cfg.data.vocab_size)
    model = instantiate(cfg.model, _partial_=True)(data=spec)
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count == lstm_params(83_828, 400, 256, 2, 2)
    assert abs(count - 34_731_777) / 34_731_777 < 1e-4  # study 1: 34,731,777 trainable


def test_vae_has_study_3_layer_shapes():
    vae = VAE()
    shapes = {name: tuple(m.weight.shape) for name, m in vae.named_children()}
    assert shapes == {
        "fc1": (400, 784),
        "fc21": (20, 400),
        "fc22": (20, 400),
        "fc3": (400, 20),
        "fc4": (784, 400),
    }
    logits, mu, logvar = vae(torch.rand(3, 1, 28, 28))
    assert logits.shape == (3, 784) and mu.shape == logvar.shape == (3, 20)


def test_too_small_images_name_the_smallest_size_that_works():
    with pytest.raises(
        IncompatibleError, match="32x32 is too small for alexnet: it needs at least 63x63"
    ):
        ImageClassifier(torchvision.models.alexnet, CIFAR, sgd)


def test_resnet18_runs_on_cifar_sized_images():
    model = ImageClassifier(torchvision.models.resnet18, CIFAR, sgd)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_model_refuses_data_of_another_modality():
    with pytest.raises(IncompatibleError, match="needs tokens data, but the data gives image"):
        TextClassifier(LSTMClassifier, CIFAR, sgd)
