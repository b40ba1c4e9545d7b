"""Case ``placement``: a run's training throughput with its samples held as tensors on the
trainer's device (``data.placement=device``) against a DataLoader over them (``loader``).

What ``data.placement=auto`` picks on a CPU (:data:`hpml.data.placement.CPU_CHOICE`) rests on
this case: both sides read the same rendered samples in the same order, so the ratio is what
the loader's per-sample indexing and collation cost. Two models: the default VGG11-CIFAR, where
the step dwarfs the data, and the VAE on MNIST-sized images, whose step is short enough for the
data path to show.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from hpml import names
from hpml.analysis.devices import default_device, device_name
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.bench.overhead import compose_in, quiet_lightning, train_quietly, training_window

THROUGHPUT = "throughput_samples_per_s"
MODELS = {  # model -> its overrides, batch size included
    "vgg11": ["model=vgg11", "data=synthetic", "data.batch_size=64"],
    "vae": ["model=vae", "data=synthetic_mnist", "data.batch_size=128"],
}
PLACEMENTS = ("device", "loader")


def overrides(model: str, placement: str, settings: Settings, root: Path) -> list[str]:
    """One run of ``model`` with ``placement``: training only, the bench's steps and store."""
    batch = int(next(o for o in MODELS[model] if o.startswith("data.batch_size=")).split("=")[1])
    return [*MODELS[model], f"data.placement={placement}", *training_window(settings, root, batch)]


def measure(model: str, placement: str, settings: Settings, root: Path) -> Measurement:
    """One ``hpml.train`` run: its own training throughput."""
    cfg = compose_in(root, overrides(model, placement, settings, root))
    return {THROUGHPUT: train_quietly(cfg, settings)[names.THROUGHPUT]}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    root = (bench_dir / "hpml").resolve()
    device = default_device()
    quiet_lightning()
    variants = {
        f"{model} {placement}": partial(measure, model, placement, settings, root)
        for model in MODELS
        for placement in PLACEMENTS
    }
    ratios = [
        Ratio(
            f"{model} device / loader",
            THROUGHPUT,
            "samples/s",
            f"{model} device",
            f"{model} loader",
        )
        for model in MODELS
    ]
    notes = {
        "device": device_name(device),
        "torch": torch.__version__,
        "models": MODELS,
        "timing": "train/throughput_samples_per_s of one hpml.train run per variant and round",
    }
    return run_case("placement", variants, ratios, settings, report, notes, group=2)
