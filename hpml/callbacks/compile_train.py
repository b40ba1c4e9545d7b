"""``compile.train=true``: the training step compiled, kept only where it is faster.

At train start the net is compiled, warmed up and timed side by side with eager steps; unless
that verdict is ``faster`` (or ``force``), the run trains eagerly. The compiled module serves
training batches only, so everything else sees the eager net. Metrics and tags:
docs/quantisation-compilation.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from hpml.analysis.stats import FASTER
from hpml.callbacks.logging import log_metrics, set_tags
from hpml.callbacks.measure import speedup_metrics
from hpml.callbacks.measure_settings import OptimizationStep
from hpml.names import S, metric
from hpml.optimize.compile.training import compile_for_training, training_speedup

log = logging.getLogger(__name__)


class CompiledTraining(OptimizationStep):
    """The training-time half of :class:`hpml.callbacks.compile.Compile` (its knobs: ``mode``,
    ``dynamic``, ``fullgraph``, ``force``, ``cache_dir``, ``train``)."""

    mode: str
    dynamic: bool | None
    fullgraph: bool
    force: bool
    cache_dir: Path | None
    compile_train: bool = False
    train_net: nn.Module | None = None  # compiled for training, shares the parameters
    eager_net: nn.Module | None = None  # put back after each training batch
    compiled_of: nn.Module | None = None  # the eager net train_net compiles

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.compile_train or self.train_net is not None:
            return
        examples = [pl_module.example_input(b) for b in _train_batch_sizes(trainer)]
        context = trainer.precision_plugin.train_step_context
        self.compiled_of = pl_module.net
        self.train_net, seconds = compile_for_training(
            pl_module.net,
            examples,
            Path(trainer.default_root_dir) / "compile" / "train",
            self.mode,
            self.dynamic,
            self.fullgraph,
            context,
            self.cache_dir,
        )
        ratio = training_speedup(
            pl_module.net, self.train_net, examples[0], context, self.settings.plan
        )
        compile_time = {metric("train", "compile_time", S): seconds}
        log_metrics(trainer, compile_time | speedup_metrics("compile", "train_speedup", ratio))
        keep = self.force or ratio.verdict == FASTER
        if not keep:
            log.warning(
                f"compile.train: a compiled training step is not faster than eager here "
                f"({ratio.describe()}, eager / compiled); training eagerly "
                f"(compile.force=true trains compiled anyway)"
            )
            self.train_net = None
        set_tags(
            trainer,
            {
                "hpml.compile.train": "compiled" if keep else "eager",
                "hpml.compile.mode": self.mode,
            },
        )

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any
    ) -> None:
        if self.train_net is None:
            return
        if pl_module.net is not self.compiled_of:
            # replaced mid-training (QAT's prepare, physical pruning): train that net eagerly
            rank_zero_warn("compile.train: the net was replaced during training; it runs eager")
            self.train_net = None
            return
        self.eager_net, pl_module.net = pl_module.net, self.train_net

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._put_back_eager(pl_module)

    on_exception = on_train_batch_end  # a failed step leaves the eager net in place too

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._put_back_eager(pl_module)
        self.train_net = self.compiled_of = None

    def _put_back_eager(self, pl_module: L.LightningModule) -> None:
        if self.eager_net is not None:
            pl_module.net, self.eager_net = self.eager_net, None


def _train_batch_sizes(trainer: L.Trainer) -> list[int]:
    """The loader's batch size, and the last batch's where the dataset leaves a smaller one."""
    loader = trainer.train_dataloader
    size = getattr(loader, "batch_size", None) or 1
    samples = len(getattr(loader, "dataset", ()))
    last = samples % size if samples and not getattr(loader, "drop_last", False) else 0
    return [size, last] if last else [size]
