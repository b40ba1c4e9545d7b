"""docs/extending.md, done from outside the package: a model family, a dataset and a callback,
each one class (here, in this module) plus one YAML (written into a config folder that Hydra
searches), run for one tiny epoch to a FINISHED MLflow run that shows the class was used. The
pruning-method and quantiser tutorials are tests/optimize/test_plugins.py."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from hpml.callbacks.base import HpmlCallback
from hpml.data.base import HpmlDataModule
from hpml.data.spec import DataSpec
from hpml.models.base import HpmlModule, Measured

HERE = __name__  # the module the YAMLs name in their _target_
TINY = [
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "callbacks.perf.warmup_steps=1",
    "logger.system_metrics_interval_s=0.5",
]


# -- a model family: a LightningModule over a plain net -------------------------------------------
class TwoLayer(nn.Sequential):
    """The family's net: flatten, a hidden layer, the class scores."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 16) -> None:
        super().__init__(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )


class MarginClassifier(HpmlModule):
    """Cross-entropy, and the mean margin of the true class's score over the best other one."""

    modality = "image"

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        return net(in_features=data.num_features, num_classes=data.num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def measure(self, output: Tensor, batch: tuple[Tensor, Tensor], stage: str) -> Measured:
        _, y = batch
        true = output.gather(1, y[:, None])[:, 0]
        other = output.scatter(1, y[:, None], float("-inf")).amax(1)
        return {"loss": F.cross_entropy(output, y), "margin": (true - other).mean()}


MODEL_YAML = f"""
# A two-layer classifier that also logs its mean margin.
defaults:
  - optimizer: adam
  - scheduler: null
  - _self_

_target_: {HERE}.MarginClassifier
net:
  _target_: {HERE}.TwoLayer
  _partial_: true
  hidden: 16
"""


# -- a dataset: a LightningDataModule that says what its samples are ------------------------------
class Stripes(HpmlDataModule):
    """Grey images whose class is the row holding a bright stripe."""

    def __init__(self, size: int = 8, samples: int = 96, **common: Any) -> None:
        super().__init__(**common)
        self.size, self.samples = size, samples

    @property
    def spec(self) -> DataSpec:
        return DataSpec("image", (1, self.size, self.size), self.size, value_range=(0.0, 1.0))

    def setup(self, stage: str | None = None) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        labels = torch.randint(self.size, (self.samples,), generator=generator)
        images = 0.1 * torch.rand(self.samples, 1, self.size, self.size, generator=generator)
        images[torch.arange(self.samples), 0, labels] = 1.0
        self.train_set = self.val_set = self.test_set = TensorDataset(images, labels)


DATA_YAML = f"""
# Stripes: 8x8 grey images, one bright row, its index the class.
_target_: {HERE}.Stripes
size: 8
samples: 96
batch_size: 32
seed: ${{seed}}
"""


# -- a callback: Lightning hooks, and what it tells hpml's lifecycle by its base class -------------
class CountBatches(HpmlCallback):
    """Logs how many training batches each epoch saw, as ``train/batches_count``."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *_: Any) -> None:
        self.batches += 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.log("train/batches_count", float(self.batches))
        self.batches = 0


CALLBACKS_YAML = f"""
# The default callbacks, and one that counts training batches.
defaults:
  - default

count_batches:
  _target_: {HERE}.CountBatches
"""


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A config folder outside the project, holding one new option of each group."""
    folder = tmp_path / "my_conf"
    for group, name, text in (
        ("model", "two_layer", MODEL_YAML),
        ("data", "stripes", DATA_YAML),
        ("callbacks", "counted", CALLBACKS_YAML),
    ):
        (folder / group).mkdir(parents=True)
        (folder / group / f"{name}.yaml").write_text(textwrap.dedent(text).lstrip())
    return folder


def finished(composed, client, conf: Path, *overrides: str) -> Any:
    """The one run a tiny in-process job with ``overrides`` leaves, FINISHED."""
    from hpml.train import train

    train(composed([f"hydra.searchpath=[file://{conf}]", *TINY, *overrides]))
    (run,) = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert run.info.status == "FINISHED"
    return run


def test_a_model_family(conf: Path, composed, client) -> None:
    run = finished(composed, client, conf, "model=two_layer", "data=synthetic_mnist")
    assert run.data.params["model._target_"] == f"{HERE}.MarginClassifier"
    assert {"train/margin", "val/margin", "test/margin"} <= set(run.data.metrics)


def test_a_dataset(conf: Path, composed, client) -> None:
    run = finished(composed, client, conf, "model=vae", "data=stripes")
    assert run.data.params["data._target_"] == f"{HERE}.Stripes"
    # the VAE sized to 8x8 = 64 inputs (fc1 64->400, ..., fc4 400->64), as the data's spec says
    fc1, fc2x, fc3, fc4 = 64 * 400 + 400, 400 * 20 + 20, 20 * 400 + 400, 400 * 64 + 64
    assert run.data.metrics["model/params_count"] == fc1 + 2 * fc2x + fc3 + fc4


def test_a_callback(conf: Path, composed, client) -> None:
    run = finished(composed, client, conf, "model=two_layer", "data=stripes", "callbacks=counted")
    assert run.data.metrics["train/batches_count"] == 3  # 96 samples in batches of 32
