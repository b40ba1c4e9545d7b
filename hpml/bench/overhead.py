"""Case ``overhead``: what ``hpml.train`` costs over a hand-written PyTorch loop.

A is ``hpml.train.train`` as a user runs it (default callbacks, an MLflow run with system
metrics); B the plain loop on the same net, data, batch, seed and optimiser. Both time their
steps with the same ``StepTimer`` and warm-up; goal: throughput A / B at least 0.98, on the
wall clock and in process CPU time (which time-slicing on a busy machine disturbs less).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import time
import warnings
from collections.abc import Sequence
from datetime import datetime
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

BATCH_SIZE = 128
HPML, HAND = "hpml.train", "hand loop"
THROUGHPUT = "throughput_samples_per_s"
CPU_THROUGHPUT = "cpu_throughput_samples_per_s"
CPU_METRIC = metric("bench", "cpu_time", S)


def ratios(numerator: str, denominator: str) -> tuple[Ratio, ...]:
    """Throughput ``numerator`` / ``denominator`` on the wall clock and in CPU time; goal 0.98."""
    return (
        Ratio("throughput (wall)", THROUGHPUT, "samples/s", numerator, denominator, goal=0.98),
        Ratio(
            "throughput (CPU time)", CPU_THROUGHPUT, "samples/CPU-s", numerator, denominator, 0.98
        ),
    )


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


def overrides(settings: Settings, root: Path) -> list[str]:
    """The job as a user would type it, plus the CPU-time probe and the bench's own store."""
    return [
        "model=vgg11",
        "data=synthetic",
        "trainer=cpu",
        f"data.batch_size={BATCH_SIZE}",
        f"data.train_samples={BATCH_SIZE * (settings.warmup + settings.steps)}",
        "trainer.max_epochs=1",
        "++trainer.limit_val_batches=0",
        "test=false",
        "++trainer.enable_progress_bar=false",
        f"callbacks.perf.warmup_steps={settings.warmup}",
        "logger.experiment_name=bench",
        f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
        f"+callbacks.bench_cpu._target_={CpuWindow.__module__}.{CpuWindow.__qualname__}",
        f"+callbacks.bench_cpu.warmup_steps={settings.warmup}",
    ]


def compose_in(root: Path, job: Sequence[str]) -> DictConfig:
    """The config of a job of overrides ``job``, a fresh output directory under ``root``."""
    from hpml.train import compose_job

    os.environ["HPML_ROOT"] = str(root)
    out_dir = root / "outputs" / datetime.now().strftime("%Y-%m-%d/%H-%M-%S_%f")
    return compose_job(list(job), out_dir)


def compose_config(settings: Settings, root: Path, extra: Sequence[str] = ()) -> DictConfig:
    """The bench job's config under ``root``; ``extra`` overrides come last."""
    return compose_in(root, [*overrides(settings, root), *extra])


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
    return {
        THROUGHPUT: metrics[names.THROUGHPUT],
        CPU_THROUGHPUT: BATCH_SIZE * settings.steps / metrics[CPU_METRIC],
    }


def run_hand_loop(cfg: DictConfig, settings: Settings) -> Measurement:
    """B: the same seed, data module, net and optimiser as ``train`` builds, in a plain loop."""
    from hpml.build import build

    torch.set_num_threads(settings.threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build("data", cfg.data)
    datamodule.prepare_data()
    net = build("model", cfg.model, data=datamodule.spec).net
    optimizer = hydra.utils.instantiate(cfg.model.optimizer)(net.parameters())
    criterion = nn.CrossEntropyLoss()
    datamodule.setup("fit")
    net.train()
    timer = StepTimer(torch.device("cpu"), settings.warmup)
    window = CpuWindow(settings.warmup)  # the CPU seconds A's probe takes, over the same steps
    for index, (x, y) in enumerate(datamodule.train_dataloader()):
        window.on_train_batch_start(index)
        timer.begin()
        loss = criterion(net(x), y)
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


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    root = (bench_dir / "hpml").resolve()
    cfg = compose_config(settings, root)
    quiet_lightning()
    variants = {HPML: lambda: run_hpml(cfg, settings), HAND: lambda: run_hand_loop(cfg, settings)}
    notes = {
        "batch_size": BATCH_SIZE,
        "model": "vgg11 (cifar layout)",
        "data": "synthetic",
        "device": "cpu",
        "torch": torch.__version__,
        "lightning": L.__version__,
        "hpml_overrides": overrides(settings, root),
        "mlflow_store": str(root / "mlflow.db"),
    }
    return run_case("overhead", variants, ratios(HPML, HAND), settings, report, notes)
