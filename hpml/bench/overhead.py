"""Case ``overhead``: what ``hpml.train`` costs over a hand-written PyTorch loop.

A is ``hpml.train.train`` as a user runs it (default callbacks, an MLflow run with system
metrics); B the plain loop on the same net, data, batch, seed, optimiser, precision and memory
format. Both read device-resident batches (``data.placement=device``: the same gathers in the
same order) and time their steps with the same ``StepTimer`` and warm-up. Per
:func:`configurations`: on a CPU VGG11-CIFAR, goal throughput A / B at least 0.98 on the wall
clock and in process CPU time (which time-slicing on a busy machine disturbs less); on a GPU
VGG16 at 224 px, batch 64, in bf16 and fp32 (goal 0.95, wall clock), and the launch-bound
VGG11-CIFAR at batch 64, whose ratio has no goal but whose step says what hpml's own work costs
(the note ``overhead_us_per_step``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from omegaconf import DictConfig
from torch import nn

from hpml import names
from hpml.analysis.timing import StepTimer
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.names import S, metric

HPML, HAND = "hpml.train", "hand loop"
THROUGHPUT = "throughput_samples_per_s"
CPU_THROUGHPUT = "cpu_throughput_samples_per_s"
CPU_METRIC = metric("bench", "cpu_time", S)


@dataclass(frozen=True)
class Config:
    """One configuration both sides train: its overrides, batch, Lightning precision, and the
    goal of A / B on the wall clock (None: reported only)."""

    label: str
    overrides: tuple[str, ...]
    batch: int
    precision: str
    goal: float | None
    trainer: str = "cpu"  # the trainer option: cpu, or gpu


VGG16 = ("model=vgg16_imagenet", "data.image_size=224", "data.num_classes=1000")


def configurations(device: torch.device) -> list[Config]:
    """What the case times on ``device``: the default model on a CPU; on a GPU what the device is
    for (study 2's VGG16 at 224 px, batch 64, in bf16 and fp32) and the launch-bound small case."""
    if device.type != "cuda":
        return [Config("VGG11-CIFAR 32px b128", ("model=vgg11",), 128, "32-true", 0.98)]
    return [
        Config("VGG16-ImageNet 224px b64 bf16", VGG16, 64, "bf16-mixed", 0.95, "gpu"),
        Config("VGG16-ImageNet 224px b64 fp32", VGG16, 64, "32-true", 0.95, "gpu"),
        Config("VGG11-CIFAR 32px b64 fp32", ("model=vgg11",), 64, "32-true", None, "gpu"),
    ]


def pair_ratios(numerator: str, denominator: str) -> tuple[Ratio, ...]:
    """Throughput ``numerator`` / ``denominator`` on the wall clock and in CPU time; goal 0.98:
    two variants of the CPU's job (the analysis cases)."""
    return (
        Ratio("throughput (wall)", THROUGHPUT, "samples/s", numerator, denominator, goal=0.98),
        Ratio(
            "throughput (CPU time)", CPU_THROUGHPUT, "samples/CPU-s", numerator, denominator, 0.98
        ),
    )


def ratios(config: Config, device: torch.device) -> tuple[Ratio, ...]:
    """Throughput A / B on the wall clock, and on a CPU in CPU time too."""
    a, b = f"{config.label} {HPML}", f"{config.label} {HAND}"
    wall = Ratio(f"{config.label} throughput (wall)", THROUGHPUT, "samples/s", a, b, config.goal)
    if device.type == "cuda":
        return (wall,)
    cpu = Ratio(
        f"{config.label} throughput (CPU time)", CPU_THROUGHPUT, "samples/CPU-s", a, b, config.goal
    )
    return wall, cpu


class CpuWindow(L.Callback):
    """Process CPU seconds over the performance monitor's window (end of the last warm-up step
    to end of the last step), logged as ``bench/cpu_time_s``; every thread counts, MLflow's
    system-metrics sampler included: a cost users pay."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.start: float | None = None
        self.stop = 0.0

    def on_train_batch_start(self, *args: Any) -> None:
        if args[-1] == 0 and self.warmup_steps == 0:  # batch_idx
            self.start = time.process_time()

    def on_train_batch_end(self, *args: Any) -> None:
        self.stop = time.process_time()
        if args[-1] + 1 == self.warmup_steps:  # batch_idx
            self.start = self.stop

    def on_train_epoch_end(self, _: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.start is not None:
            pl_module.log(CPU_METRIC, self.stop - self.start, on_epoch=True)


def overrides(settings: Settings, root: Path, config: Config | None = None) -> list[str]:
    """The job as a user would type it, plus the CPU-time probe and the bench's own store."""
    config = config or configurations(torch.device("cpu"))[0]
    return [
        *config.overrides,
        "data=synthetic",
        f"trainer={config.trainer}",
        f"trainer.precision={config.precision}",
        "data.placement=device",
        f"data.batch_size={config.batch}",
        *training_window(settings, root, config.batch),
        f"+callbacks.bench_cpu._target_={CpuWindow.__module__}.{CpuWindow.__qualname__}",
        f"+callbacks.bench_cpu.warmup_steps={settings.warmup}",
    ]


def training_window(settings: Settings, root: Path, batch: int) -> list[str]:
    """A bench job's training only: one epoch of the bench's warm-up and timed steps of
    ``batch``, no validation, test or progress bar, into the bench's own store."""
    return [
        f"data.train_samples={batch * (settings.warmup + settings.steps)}",
        "trainer.max_epochs=1",
        "++trainer.limit_val_batches=0",
        "test=false",
        "++trainer.enable_progress_bar=false",
        f"callbacks.perf.warmup_steps={settings.warmup}",
        "logger.experiment_name=bench",
        f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
    ]


def compose_in(root: Path, job: Sequence[str]) -> DictConfig:
    """The config of a job of overrides ``job``, a fresh output directory under ``root``."""
    from hpml.train import compose_job

    os.environ["HPML_ROOT"] = str(root)
    out_dir = root / "outputs" / datetime.now().strftime("%Y-%m-%d/%H-%M-%S_%f")
    return compose_job(list(job), out_dir)


def compose_config(
    settings: Settings, root: Path, extra: Sequence[str] = (), config: Config | None = None
) -> DictConfig:
    """The bench job's config under ``root``; ``extra`` overrides come last."""
    return compose_in(root, [*overrides(settings, root, config), *extra])


def quiet_lightning() -> None:
    """Without Lightning's "GPU available: ..." lines."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def train_quietly(cfg: DictConfig, settings: Settings) -> dict[str, float]:
    """``hpml.train.train(cfg)`` at the bench's threads, its prints and warnings kept out."""
    from hpml.train import train

    torch.set_num_threads(settings.threads)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics = train(cfg)
    check_threads(settings)
    return metrics


def check_threads(settings: Settings) -> None:
    """Fail if something changed torch's thread count mid-run: the sides would not be alike."""
    if torch.get_num_threads() != settings.threads:
        raise RuntimeError(
            f"torch runs {torch.get_num_threads()} threads after a variant, "
            f"not the {settings.threads} the bench set"
        )


def run_hpml(cfg: DictConfig, settings: Settings) -> Measurement:
    """A: one ``hpml.train`` job; its own throughput metric, and the probe's CPU seconds."""
    metrics = train_quietly(cfg, settings)
    samples = cfg.data.batch_size * settings.steps
    return {THROUGHPUT: metrics[names.THROUGHPUT], CPU_THROUGHPUT: samples / metrics[CPU_METRIC]}


def run_hand_loop(cfg: DictConfig, settings: Settings) -> Measurement:
    """B: the same seed, data, net, optimiser, precision and memory format as ``train`` builds,
    in a plain loop on the trainer's device, over the batches its data module holds there."""
    from hpml.build import build
    from hpml.data.placement import DeviceBatches

    torch.set_num_threads(settings.threads)
    device = torch.device("cuda" if cfg.trainer.accelerator == "gpu" else "cpu")
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build("data", cfg.data)
    datamodule.prepare_data()
    module = build("model", cfg.model, data=datamodule.spec)
    layout = torch.channels_last if cfg.model.get("channels_last") else torch.contiguous_format
    net = module.net.to(device, memory_format=layout)
    optimizer = hydra.utils.instantiate(cfg.model.optimizer)(net.parameters())
    criterion = nn.CrossEntropyLoss()
    datamodule.setup("fit")
    held = datamodule.in_memory("train").head(datamodule.limit)
    batches = DeviceBatches(held, datamodule.batch_size, device, shuffle=True, seed=datamodule.seed)
    half = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(cfg.trainer.precision)
    net.train()
    timer = StepTimer(device, settings.warmup)
    window = CpuWindow(settings.warmup)  # the CPU seconds A's probe takes, over the same steps
    for index, (x, y) in enumerate(batches):
        window.on_train_batch_start(index)
        timer.begin()
        with torch.autocast(device.type, half or torch.float32, enabled=half is not None):
            loss = criterion(net(x.to(memory_format=layout)), y)
        # between forward and backward, where Lightning's closure zeroes: zeroing first (the
        # textbook order) costs allocator page faults, which are not framework overhead
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        timer.end(x.shape[0])
        window.on_train_batch_end(index)
    stats = timer.stats()
    if stats is None or window.start is None:
        raise RuntimeError("the hand loop ran no steps after warm-up")
    check_threads(settings)
    return {
        THROUGHPUT: stats.throughput_samples_per_s,
        CPU_THROUGHPUT: stats.samples / (window.stop - window.start),
    }


def measure(
    run_side: Callable[[DictConfig, Settings], Measurement],
    config: Config,
    settings: Settings,
    root: Path,
) -> Measurement:
    """One side's run of ``config``, composed afresh (its own output folder)."""
    return run_side(compose_config(settings, root, config=config), settings)


def cost_per_step_us(result: CaseResult, config: Config) -> float:
    """What hpml's own work costs a step of ``config``, microseconds: the median over rounds of
    the two sides' seconds per batch (batch over throughput) apart."""
    gaps = [
        config.batch
        * (
            1 / r.measurements[f"{config.label} {HPML}"][THROUGHPUT]
            - 1 / r.measurements[f"{config.label} {HAND}"][THROUGHPUT]
        )
        for r in result.rounds
    ]
    return 1e6 * statistics.median(gaps)


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    root = (bench_dir / "hpml").resolve()
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    quiet_lightning()
    variants, found = {}, []
    for config in configurations(device):
        for side, run_side in ((HPML, run_hpml), (HAND, run_hand_loop)):
            variants[f"{config.label} {side}"] = partial(measure, run_side, config, settings, root)
        found += ratios(config, device)
    notes = {
        "configurations": {c.label: overrides(settings, root, c) for c in configurations(device)},
        "device": device.type,
        "data": "synthetic, held on the device (data.placement=device) on both sides",
        "torch": torch.__version__,
        "lightning": L.__version__,
        "mlflow_store": str(root / "mlflow.db"),
    }
    result = run_case("overhead", variants, found, settings, report, notes, group=2)
    result.notes["overhead_us_per_step"] = {
        c.label: cost_per_step_us(result, c) for c in configurations(device)
    }
    return result
