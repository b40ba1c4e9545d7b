"""Every training step cut into labelled regions; ``profile=nvtx``: those regions as NVTX ranges
alone, for Nsight Systems and Nsight Compute.

The regions are ``hpml/data``, ``hpml/forward``, ``hpml/zero_grad``, ``hpml/backward`` and
``hpml/optimizer_step``, each closed when the next opens. ``profile=torch`` (a subclass, in
:mod:`hpml.callbacks.profiler`) records them for torch.profiler too. Under an Nsight tool only
``profile=nvtx`` fits: torch.profiler traces CUDA through CUPTI, which takes one subscriber, and
an Nsight tool is one (NVIDIA's CUPTI documentation, "Limitations").
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.autograd.profiler import record_function

from hpml.analysis.profile_summary import DATA_REGION
from hpml.callbacks.base import HpmlCallback


class StepRegions:
    """Consecutive named ranges: opening one closes the previous.

    Args:
        record: each range also a ``record_function``, seen by torch.profiler.
        nvtx: each range also an NVTX range (torch built with CUDA), seen by Nsight.
    """

    def __init__(self, record: bool, nvtx: bool) -> None:
        self.record, self.nvtx = record, nvtx
        self.current: record_function | None = None
        self.opened = False

    def open(self, name: str) -> None:
        self.close()
        if self.record:
            self.current = record_function(name)
            self.current.__enter__()
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        self.opened = True

    def close(self) -> None:
        if not self.opened:
            return
        if self.current is not None:
            self.current.__exit__(None, None, None)
            self.current = None
        if self.nvtx:
            torch.cuda.nvtx.range_pop()
        self.opened = False


class StepRanges(HpmlCallback):
    """``profile=nvtx``: every training step's regions as NVTX ranges, with no profiler of
    hpml's own running, so that an Nsight tool attached to the run is the only one."""

    def __init__(self) -> None:
        self.regions = StepRegions(record=False, nvtx=False)

    def regions_for(self, pl_module: L.LightningModule) -> StepRegions:
        """The regions a run on ``pl_module``'s device opens: NVTX on every device (Nsight
        Systems traces NVTX on the CPU too)."""
        return StepRegions(record=False, nvtx=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.regions = self.regions_for(pl_module)
        self.regions.open(DATA_REGION)

    def on_train_batch_start(self, *_: Any) -> None:
        self.regions.open("hpml/forward")

    def on_before_zero_grad(self, *_: Any) -> None:
        self.regions.open("hpml/zero_grad")

    def on_before_backward(self, *_: Any) -> None:
        self.regions.open("hpml/backward")

    def on_before_optimizer_step(self, *_: Any) -> None:
        self.regions.open("hpml/optimizer_step")

    def on_train_batch_end(self, *_: Any) -> None:
        self.regions.close()
        self.stepped()
        self.regions.open(DATA_REGION)

    def stepped(self) -> None:
        """A training step ended and its regions are closed; nothing more here."""

    def on_exception(self, *_: Any) -> None:
        """Close the open range (NVTX ranges are per thread, not per run), a failed run's too."""
        self.regions.close()

    on_train_epoch_end = on_train_end = on_exception
