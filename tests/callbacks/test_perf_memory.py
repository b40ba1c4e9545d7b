"""Each stage's peak memory: a training epoch's peak survives the validation run inside it.

Lightning validates inside the training epoch, before ``on_train_epoch_end``, and every stage
resets CUDA's peak statistics when it starts; the training peak is the training steps', before
and after any validation. On CPU a fake allocator stands in for CUDA's; on CUDA the allocator's
own reading, the breakdown's parts and a hand count of the weights check the real one.
"""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch

from hpml.callbacks import perf
from hpml.callbacks.perf import PerformanceMonitor
from hpml.data.synthetic import SyntheticDataModule
from hpml.models.nets.vae import VAE
from hpml.models.vae import VAEModule
from hpml.train import train
from tests.conftest import QUICK
from tests.helpers import ALLOCATOR_PEAK

TRAIN_STEPS = 4  # batches per training epoch below, validated after the second and the fourth
VALIDATION = 300  # bytes each validation step peaks at
LOW, HIGH = 1000, 5000  # bytes each training step peaks at; one step reaches HIGH


class FakeAllocator:
    """An allocator's peak statistics as CUDA keeps them: a reset restarts the peak from what is
    in use, and every step rises to its own peak then frees all but ``in_use``."""

    def __init__(self) -> None:
        self.in_use = self.peak = 10

    def step(self, nbytes: int) -> None:
        self.peak = max(self.peak, nbytes)

    def reset(self, device: torch.device) -> None:
        self.peak = self.in_use

    def read(self, device: torch.device) -> tuple[int, str]:
        return self.peak, "fake allocator"


class Steps(L.Callback):
    """Drives the fake allocator: training step ``high_step`` peaks at HIGH, the others at LOW,
    validation steps at VALIDATION."""

    def __init__(self, allocator: FakeAllocator, high_step: int) -> None:
        self.allocator, self.high_step = allocator, high_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.allocator.step(HIGH if batch_idx == self.high_step else LOW)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *_):
        self.allocator.step(VALIDATION)


@pytest.mark.parametrize(
    "high_step", [0, TRAIN_STEPS - 1], ids=["before_validation", "after_validation"]
)
def test_training_peak_spans_the_validation_inside_its_epoch(monkeypatch, high_step):
    allocator = FakeAllocator()
    monkeypatch.setattr(perf, "peak_memory_bytes", allocator.read)
    monkeypatch.setattr(perf, "reset_peak_memory", allocator.reset)
    L.seed_everything(0)
    data = SyntheticDataModule(
        channels=1, image_size=28, train_samples=4 * TRAIN_STEPS, val_samples=8, batch_size=4
    )
    model = VAEModule(
        partial(VAE, hidden=16, latent=4), data.spec, partial(torch.optim.SGD, lr=0.01)
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        val_check_interval=0.5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[
            PerformanceMonitor(warmup_steps=0, count_flops=False),
            Steps(allocator, high_step),
        ],
    )
    trainer.fit(model, datamodule=data)
    metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    assert metrics["train/peak_memory_bytes"] == HIGH  # not the last validation's VALIDATION
    assert metrics["val/peak_memory_bytes"] == VALIDATION


# the study-3 VAE: fc1 784->400, fc21 and fc22 400->20, fc3 20->400, fc4 400->784, with biases
VAE_PARAMS = (784 * 400 + 400) + 2 * (400 * 20 + 20) + (20 * 400 + 400) + (400 * 784 + 784)
VAE_TENSORS = 10  # a weight and a bias per layer


@pytest.mark.gpu
def test_cuda_training_peak_is_the_allocators_and_holds_weights_gradients_and_state(
    composed, client
):
    cfg = composed(
        [
            "trainer=gpu",
            "model=vae",
            *QUICK,
            "+callbacks.allocator._target_=tests.helpers.AllocatorPeak",
        ]
    )
    train(cfg)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    m, tags = run.data.metrics, run.data.tags
    assert tags["hpml.device"] == f"cuda: {torch.cuda.get_device_name(0)}"
    assert tags["hpml.peak_memory_source"] == "torch.cuda.max_memory_allocated"
    # the allocator's own reading after the epoch's last training step; Lightning logs hpml's
    # figure as float32, so equal to 1e-7
    assert m[ALLOCATOR_PEAK] > 0
    assert m["train/peak_memory_bytes"] == pytest.approx(m[ALLOCATOR_PEAK], rel=1e-6)
    weights = 4 * VAE_PARAMS  # float32, counted by hand
    assert m["memory/weights_bytes"] == weights
    assert m["memory/gradients_bytes"] == weights  # every parameter has its gradient
    # Adam: two moments per parameter on the GPU, and a 4-byte step count per tensor (kept on
    # the host unless Adam is capturable or fused)
    state = m["memory/optimizer_state_bytes"]
    assert 2 * weights <= state <= 2 * weights + 8 * VAE_TENSORS
    held = m["memory/weights_bytes"] + m["memory/gradients_bytes"] + state
    assert m["train/peak_memory_bytes"] >= held
    assert m["memory/peak_bytes"] >= held  # the first step's, after its optimiser step
    # validation runs while the weights, gradients and state are held, without the training
    # step's activations and the optimiser's temporaries: below the training peak
    assert held <= m["val/peak_memory_bytes"] < m["train/peak_memory_bytes"]
