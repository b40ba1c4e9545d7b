"""Before/after figures of one variant of a model, shared by every optimisation callback.

Pruning, quantisation and compilation (and what comes next) measure "before" and "after" through
:func:`measure`, so their figures are comparable: the same latency settings (``Settings``, one set
of defaults, also in ``conf/base/measure.yaml``) and the same judge of quality, the model's own
``validation_step`` run over validation batches with the variant in place of ``pl_module.net``.
Metrics are ``<stage>/<quantity>_<unit>`` (:func:`hpml.names.metric`):

- ``size_bytes``: ``torch.save`` of the variant's state dict (or the saved file a compiler wrote);
- ``latency_b1_ms``, ``latency_b<N>_ms`` (median) and ``..._p90_ms``: eval-mode forward passes at
  batch 1 and at ``latency_batch_size`` N (:func:`hpml.analysis.latency.measure_latency`);
- what ``validation_step`` logs, averaged per sample: ``val_loss_nats``, ``val_acc_pct`` (top-1,
  percent), a VAE's ``val_{loss,bce,kld}_nats``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import nn
from torchmetrics import Metric

from hpml.analysis.latency import measure_latency
from hpml.analysis.model_stats import state_dict_bytes
from hpml.errors import ConfigError, non_negative_int, positive_int
from hpml.names import BYTES, MS, NATS, PCT, metric
from hpml.optimize.quant.base import OnDevice
from hpml.tensors import batch_size

LATENCY_ROUNDS = 20
LATENCY_WARMUP = 3


@dataclass(frozen=True)
class Settings:
    """How a variant is measured: latency at batch 1 and ``batch_size``, quality on
    ``eval_batches`` validation batches (``None``: all of them)."""

    batch_size: int
    rounds: int = LATENCY_ROUNDS
    warmup: int = LATENCY_WARMUP
    eval_batches: int | None = None

    @classmethod
    def checked(
        cls,
        latency_batch_size: int,
        latency_rounds: int,
        latency_warmup: int,
        eval_batches: int | None,
    ) -> Settings:
        """Settings from a callback's config values, each refused in one line when invalid."""
        return cls(
            positive_int("latency_batch_size", latency_batch_size),
            positive_int("latency_rounds", latency_rounds),
            non_negative_int("latency_warmup", latency_warmup),
            None if eval_batches is None else non_negative_int("eval_batches", eval_batches),
        )


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
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "val_dataloader"):
        return None
    try:
        return datamodule.val_dataloader()
    except ConfigError:
        return None


@contextmanager
def net_in_place(pl_module: L.LightningModule, net: nn.Module) -> Iterator[None]:
    """``pl_module.net`` is ``net`` inside the block and what it was after."""
    saved = pl_module.net
    pl_module.net = net
    try:
        yield
    finally:
        pl_module.net = saved


def validation_quality(
    pl_module: L.LightningModule, loader: Any, max_batches: int | None
) -> dict[str, float]:
    """Run the module's own ``validation_step`` over ``loader``, capturing what it logs.

    Tensors are averaged weighted by batch size; torchmetrics objects are computed and reset.
    ``pl_module.log`` is swapped out for the loop, so nothing reaches the trainer's logged metrics.
    """
    sums: dict[str, float] = defaultdict(float)
    weights: dict[str, int] = defaultdict(int)
    metrics: dict[str, Metric] = {}
    current = {"size": 1}

    def capture(name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(value, Metric):
            metrics[name] = value
        else:
            sums[name] += float(value) * current["size"]
            weights[name] += current["size"]

    was_training = pl_module.training
    pl_module.eval()
    pl_module.log = capture  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            for index, batch in enumerate(loader):
                if max_batches is not None and index >= max_batches:
                    break
                batch = move_data_to_device(batch, pl_module.device)
                current["size"] = batch_size(batch)
                pl_module.validation_step(batch, index)
    finally:
        del pl_module.log
        pl_module.train(was_training)
    result = {name: sums[name] / weights[name] for name in sums if weights[name]}
    for name, value in metrics.items():
        result[name] = float(value.compute())
        value.reset()
    return result


def quality(
    trainer: L.Trainer, pl_module: L.LightningModule, stage: str, max_batches: int | None
) -> dict[str, float]:
    """``<stage>/val_..._<unit>`` of ``pl_module`` as it is now; empty without validation data."""
    loader = val_loader(trainer)
    if loader is None or max_batches == 0:
        return {}
    named = (
        quality_name(name, value)
        for name, value in validation_quality(pl_module, loader, max_batches).items()
    )
    return {f"{stage}/{quantity}": value for quantity, value in named}


def measure(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    stage: str,
    settings: Settings,
    net: nn.Module | None = None,
    device: torch.device | None = None,
    size_bytes: int | None = None,
) -> dict[str, float]:
    """Size, latency and validation quality of ``net`` (default: ``pl_module.net``) on
    ``device`` (default: the module's), as ``<stage>/...`` metrics.

    For quality ``net`` stands in for ``pl_module.net``, behind :class:`OnDevice` when it runs
    on another device than the module (an int8 model on CPU inside a CUDA run).
    """
    net = pl_module.net if net is None else net
    device = pl_module.device if device is None else device
    size = state_dict_bytes(net) if size_bytes is None else size_bytes
    found = {metric(stage, "size", BYTES): float(size)}
    for batch in dict.fromkeys((1, settings.batch_size)):
        example = pl_module.example_input(batch).to(device)
        stats = measure_latency(net, example, settings.rounds, settings.warmup)
        found[metric(stage, f"latency_b{batch}", MS)] = stats.median_ms
        found[metric(stage, f"latency_b{batch}_p90", MS)] = stats.p90_ms
    judged = net if device == pl_module.device else OnDevice(net, device)
    with net_in_place(pl_module, judged):
        found |= quality(trainer, pl_module, stage, settings.eval_batches)
    return found
