"""Before/after measurements of one variant of a model, shared by every optimisation callback.

Pruning, quantisation and compilation measure through :func:`compare` so their numbers compare:
one set of latency settings, one judge of quality (the model's validation step with the variant
in place of ``pl_module.net``), the two sides timed side by side in alternating rounds. The
metrics: docs/metrics.md#before-and-after.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import nn
from torchmetrics import Metric

from hpml.analysis.blocks import THREAD_CPU, WALL
from hpml.analysis.compare import (
    BUDGET,
    FIXED,
    NARROW,
    Speedup,
    Timing,
    compare_forward,
    evaluating,
    speedup,
)
from hpml.analysis.model_stats import state_dict_bytes
from hpml.callbacks.logging import log_metrics, set_tags
from hpml.callbacks.measure_settings import Settings
from hpml.errors import ConfigError
from hpml.models.base import HpmlModule
from hpml.names import BYTES, COUNT, MS, NATS, PCT, X, metric, step_tag, verdict_tag
from hpml.optimize.quant.base import OnDevice
from hpml.tensors import batch_size

log = logging.getLogger(__name__)
CLOCK_WORDS = {THREAD_CPU: "thread CPU time (one torch thread)", WALL: "wall time"}
STOP_WORDS = {NARROW: "narrow", BUDGET: "budget spent", FIXED: "rounds fixed"}


def on_trainer_device(trainer: L.Trainer, pl_module: L.LightningModule) -> torch.device:
    """Put ``pl_module`` back on the trainer's device, and return that device: Lightning's
    teardown moves it to the CPU before ``on_fit_end``, where callbacks measure and convert."""
    device = trainer.strategy.root_device
    if pl_module.device != device:
        pl_module.to(device)
    return device


@dataclass(frozen=True)
class Side:
    """One variant to measure: the stage its metrics go under, the net, the device it runs on,
    and its size where that is not its state dict's (a compiler's saved file)."""

    stage: str
    net: nn.Module
    device: torch.device
    size_bytes: int | None = None


def quality_name(name: str, value: float) -> tuple[str, float]:
    """``val/acc`` -> (``val_acc_pct``, percent); losses -> ``..._nats``; others unit-less."""
    quantity = name.replace("/", "_")
    if quantity.endswith("acc"):
        return f"{quantity}_{PCT}", 100.0 * value
    if any(word in quantity for word in ("loss", "bce", "kld")):
        return f"{quantity}_{NATS}", value
    return quantity, value


def val_loader(trainer: L.Trainer) -> Any:
    """The datamodule's validation loader, or None when the run has no validation split."""
    if trainer.datamodule is None:
        return None
    try:
        return trainer.datamodule.val_dataloader()
    except ConfigError:
        return None


def validation_quality(
    pl_module: HpmlModule, loader: Any, max_batches: int | None
) -> dict[str, float]:
    """What the module's validation step measures over ``loader`` (:meth:`HpmlModule.measured`,
    logging nothing), as ``val/<name>``: tensors averaged weighted by batch size, torchmetrics
    objects computed and reset."""
    sums: dict[str, float] = defaultdict(float)
    weights: dict[str, int] = defaultdict(int)
    metrics: dict[str, Metric] = {}
    with evaluating([pl_module]), torch.no_grad():
        for batch in itertools.islice(loader, max_batches):
            batch = move_data_to_device(batch, pl_module.device)
            for name, value in pl_module.measured(batch, "val").items():
                if isinstance(value, Metric):
                    metrics[f"val/{name}"] = value
                else:
                    sums[f"val/{name}"] += float(value) * batch_size(batch)
                    weights[f"val/{name}"] += batch_size(batch)
    result = {name: sums[name] / weights[name] for name in sums if weights[name]}
    for name, value in metrics.items():
        result[name] = float(value.compute())
        value.reset()
    return result


def quality(
    trainer: L.Trainer, pl_module: HpmlModule, stage: str, max_batches: int | None
) -> dict[str, float]:
    """``<stage>/val_..._<unit>`` of ``pl_module`` as it is now; empty without validation data."""
    loader = val_loader(trainer)
    if loader is None or max_batches == 0:
        return {}
    found = validation_quality(pl_module, loader, max_batches)
    return {f"{stage}/{q}": value for q, value in map(quality_name, found, found.values())}


def size_and_quality(
    trainer: L.Trainer, pl_module: HpmlModule, settings: Settings, side: Side
) -> dict[str, float]:
    """Size and validation quality of ``side``, without latency; its net stands in for
    ``pl_module.net``, behind :class:`OnDevice` when it runs on another device."""
    size = state_dict_bytes(side.net) if side.size_bytes is None else side.size_bytes
    found = {metric(side.stage, "size", BYTES): float(size)}
    saved = pl_module.net
    pl_module.net = side.net if side.device == pl_module.device else OnDevice(side.net, side.device)
    try:
        found |= quality(trainer, pl_module, side.stage, settings.eval_batches)
    finally:
        pl_module.net = saved
    return found


def latency_metrics(stage: str, quantity: str, timing: Timing) -> dict[str, float]:
    """``<stage>/<quantity>_ms`` (``latency_b<N>``) and ``_iqr_ms`` on the wall clock, and where
    the rounds ran on the thread's CPU clock, ``<quantity>_thread_cpu_ms`` and its ``_iqr_ms``."""
    found = {
        metric(stage, quantity, MS): timing.wall_median_ms,
        metric(stage, f"{quantity}_iqr", MS): timing.wall_iqr_ms,
    }
    if timing.clock == THREAD_CPU:
        found[metric(stage, f"{quantity}_thread_cpu", MS)] = timing.median_ms
        found[metric(stage, f"{quantity}_thread_cpu_iqr", MS)] = timing.iqr_ms
    return found


def speedup_metrics(stage: str, quantity: str, ratio: Speedup) -> dict[str, float]:
    """``<stage>/<quantity>_x`` (the median ratio) with its interval's ``_ci_low_x`` and
    ``_ci_high_x`` and its ``_rounds_count``."""
    i = ratio.interval
    return {
        metric(stage, quantity, X): i.median,
        metric(stage, f"{quantity}_ci_low", X): i.low,
        metric(stage, f"{quantity}_ci_high", X): i.high,
        metric(stage, f"{quantity}_rounds", COUNT): float(i.n),
    }


@dataclass(frozen=True)
class Comparison:
    """Both sides' metrics, the speed-ups with their intervals, tags, and one line per verdict."""

    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    lines: tuple[str, ...] = ()

    def log(self, trainer: L.Trainer, extra: dict[str, float] | None = None) -> None:
        """Metrics (with ``extra``), tags, and each verdict as a line of the run's log."""
        log_metrics(trainer, self.metrics | (extra or {}))
        set_tags(trainer, self.tags)
        for line in self.lines:
            log.info(line)


def compare(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    settings: Settings,
    name: str,
    before: Side,
    after: Side,
) -> Comparison:
    """``before`` against ``after``, timed side by side: each side's metrics and, per batch
    size, the speed-up before / after with its interval, n and verdict (module docstring)."""
    timings = {  # per batch size, each side's forward on its device
        batch: compare_forward(
            {
                s.stage: (s.net, pl_module.example_input(batch).to(s.device))
                for s in (before, after)
            },
            settings.plan,
        )
        for batch in settings.batch_sizes
    }
    metrics = size_and_quality(trainer, pl_module, settings, before)
    metrics |= size_and_quality(trainer, pl_module, settings, after)
    for batch, timing in timings.items():
        for side in (before, after):
            metrics |= latency_metrics(side.stage, f"latency_b{batch}", timing[side.stage])
    devices = f"{before.device} vs {after.device}"
    clock = next(iter(timings.values()))[before.stage].clock
    tags = {step_tag("compare", f"{name}.devices"): devices}
    tags[step_tag("compare", f"{name}.clock")] = clock
    lines, rounds = [], []
    for batch, timing in timings.items():
        ratio = speedup(timing[before.stage].rounds_ms, timing[after.stage].rounds_ms)
        quantity = f"speedup_b{batch}"
        metrics |= speedup_metrics(name, quantity, ratio)
        stopped = timing[before.stage].stopped
        tags[verdict_tag(name, batch)] = ratio.verdict
        tags[step_tag("compare", f"{name}.{quantity}_stopped")] = stopped
        across = "" if before.device == after.device else f"; across devices: {devices}"
        lines.append(f"{name}: speed-up at batch {batch}: {ratio.describe()}{across}")
        rounds.append(f"batch {batch}: {ratio.interval.n} rounds, {STOP_WORDS[stopped]}")
    lines.append(f"{name}: timed on {CLOCK_WORDS[clock]}; {'; '.join(rounds)}")
    return Comparison(metrics, tags, tuple(lines))
