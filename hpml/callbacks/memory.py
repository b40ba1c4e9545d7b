"""Where training memory goes: weights, gradients, optimiser state, saved activations, peak."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch

from hpml.analysis.memory import (
    SavedActivations,
    optimizer_state_tensors,
    peak_memory_bytes,
    tensor_bytes,
)
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_figure, log_file, log_metrics, log_text
from hpml.callbacks.ranks import across_ranks
from hpml.models.base import HpmlModule
from hpml.names import BYTES, metric

PARTS = ("weights", "gradients", "optimizer_state", "activations")


class MemoryBreakdown(HpmlCallback):
    """Measures the first training step of the run and logs ``memory/<part>_bytes`` for
    weights, gradients, optimiser state and activations (what autograd saved, each storage once),
    their sum ``memory/training_total_bytes`` (a lower bound) and ``memory/peak_bytes``, a bar
    chart ``memory/breakdown.png`` and, on CUDA with ``cuda_snapshot``, the allocator's snapshot.

    The figures are taken at the step's end and logged when training ends: logged there, they
    and the chart would sit in the host's time between two timed steps, which the run reports
    as waiting for data (``<stage>/data_wait_pct``)."""

    # in a fused array: left out, as it measures one net's step (the memory guard sizes arrays)
    in_array: ClassVar[InArray] = InArray.NOT_IN_ARRAYS

    def __init__(self, cuda_snapshot: bool = False) -> None:
        self.cuda_snapshot = cuda_snapshot
        self.saved: SavedActivations | None = None
        self.activations = 0
        self.done = False
        self.measured: dict[str, float] = {}
        self.parts: dict[str, int] = {}
        self.label = ""

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any
    ) -> None:
        if self.done:
            return
        if self.cuda_snapshot and pl_module.device.type == "cuda":
            torch.cuda.memory._record_memory_history()
        self.saved = SavedActivations(pl_module)
        self.saved.__enter__()

    def _stop_recording(self) -> None:
        if self.saved is not None:
            self.saved.__exit__(None, None, None)
            self.activations = self.saved.bytes
            self.saved = None

    def on_before_backward(self, *_: Any) -> None:
        self._stop_recording()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        """Never leave the saved-tensor hooks (process-wide) on after a failed step."""
        self._stop_recording()
        if self.cuda_snapshot and pl_module.device.type == "cuda":
            torch.cuda.memory._record_memory_history(enabled=None)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if self.done:
            return
        self.done = True
        self._stop_recording()  # a step with no backward (manual optimisation) ends it here
        params = list(pl_module.parameters())
        parts = {
            "weights": tensor_bytes(params),
            "gradients": tensor_bytes(p.grad for p in params if p.grad is not None),
            "optimizer_state": tensor_bytes(
                t for opt in trainer.optimizers for t in optimizer_state_tensors(opt)
            ),
            "activations": self.activations,
        }
        metrics = {metric("memory", part, BYTES): float(value) for part, value in parts.items()}
        metrics[metric("memory", "training_total", BYTES)] = float(sum(parts.values()))
        metrics[metric("memory", "peak", BYTES)] = float(peak_memory_bytes(pl_module.device)[0])
        net = pl_module.net if isinstance(pl_module, HpmlModule) else pl_module
        self.measured, self.parts, self.label = metrics, parts, type(net).__name__
        if self.cuda_snapshot and pl_module.device.type == "cuda":
            with tempfile.TemporaryDirectory() as tmp:
                path = str(Path(tmp) / "cuda_snapshot.pickle")
                torch.cuda.memory._dump_snapshot(path)
                torch.cuda.memory._record_memory_history(enabled=None)
                log_file(trainer, path, "memory")

    def on_train_end(self, trainer: L.Trainer, *_: Any) -> None:
        if not self.measured:
            return
        log_metrics(trainer, across_ranks(trainer, self.measured, "max"))  # DDP: the largest's
        if trainer.is_global_zero:
            self._plot(trainer, self.parts, self.label)

    @staticmethod
    def _plot(trainer: L.Trainer, parts: dict[str, int], label: str) -> None:
        """One stacked bar of the parts, in MiB."""
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt

        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        fig.subplots_adjust(left=0.15, right=0.55)
        bottom = 0.0
        for part in PARTS:
            mib = parts[part] / 2**20
            ax.bar([label], [mib], bottom=bottom, label=f"{part.replace('_', ' ')}: {mib:.1f} MiB")
            bottom += mib
        ax.set_ylabel("MiB")
        ax.set_title("Training memory, first step", fontsize=10)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(
            handles[::-1],
            labels[::-1],
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            frameon=False,
        )
        log_figure(trainer, fig, "memory/breakdown.png")
        plt.close(fig)
        log_text(trainer, "".join(f"{p},{parts[p]}\n" for p in PARTS), "memory/breakdown.csv")
