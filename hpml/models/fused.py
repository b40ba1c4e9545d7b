"""A fused training array as one LightningModule: N members of one family trained together.

Each member is an ordinary :class:`~hpml.models.base.HpmlModule` built from its own job's
config: its optimiser and scheduler (its own learning rate, weight decay, momentum, betas), its
loss and metrics come from it unchanged. Only the forward pass is shared
(:class:`~hpml.optimize.fuse.array.FusedNets`): one vmapped call, then each member scores its
slice. The members' losses are summed for one backward; as no parameter is shared, each member
gets exactly its own gradient, then its own optimiser steps. Optimisation is manual because
Lightning's automatic loop drives one optimiser.

Metrics are logged as ``fused<i>/<stage>/<name>``; :class:`~hpml.tracking.fused.MemberLogger`
files them in member i's run under ``<stage>/<name>``, as a serial run names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor

from hpml.models.base import HpmlModule, log_measured
from hpml.names import member_prefix
from hpml.optimize.fuse.array import FusedNets, member_output


class FusedArray(L.LightningModule):
    """``members`` trained as one array. Batches are one ``(x, y)`` every member sees
    (``shared_data``: their data and its order are the same) or a list with one ``(x, y)`` per
    member (their seeds differ). A member whose training loss stops being finite is frozen: it
    no longer steps nor logs, while the others train on (a diverging learning rate must not end
    its array)."""

    def __init__(self, members: Sequence[HpmlModule], shared_data: bool = True) -> None:
        super().__init__()
        self.shared_data = shared_data
        self.members = torch.nn.ModuleList(members)
        self.fused = FusedNets([member.net for member in members])
        for member, net in zip(self.members, self.fused.nets, strict=True):
            member.net = net  # the same net, its LSTMs in vmappable form
        # members done training: their loss went non-finite, or their target stopped them
        # (hpml.callbacks.fused); they are still tested, as a stopped serial job is
        self.frozen: set[int] = set()
        self.automatic_optimization = False

    def __len__(self) -> int:
        return len(self.members)

    def example_input(self, batch_size: int = 1) -> Tensor:
        return self.members[0].example_input(batch_size)

    def forward(self, x: Any, stacked: bool = False) -> Any:
        return self.fused(x, stacked)

    def _split(self, batch: Any) -> tuple[Any, bool, list[Any]]:
        """The fused input, whether it is per member, and each member's own batch."""
        if not self.shared_data:  # one (x, y) per member
            batches = [self.members[i]._formatted(b) for i, b in enumerate(batch)]
            return torch.stack([b[0] for b in batches]), True, batches
        shared = self.members[0]._formatted(batch)
        return shared[0], False, [shared] * len(self.members)

    def _scored(self, batch: Any, stage: str) -> list[Tensor | None]:
        """Each active member's loss of ``batch`` (None for a frozen one), its metrics logged."""
        x, stacked, batches = self._split(batch)
        output = self(x, stacked)
        losses: list[Tensor | None] = []
        for index, member in enumerate(self.members):
            if index in self.frozen and stage != "test":  # its fit is over; its test is not
                losses.append(None)
                continue
            measured = member.measure(member_output(output, index), batches[index], stage)
            log_measured(self, measured, stage, prefix=member_prefix(index))
            losses.append(measured["loss"])
        return losses

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        losses = self._scored(batch, "train")
        scored = [index for index, loss in enumerate(losses) if loss is not None]
        finite = torch.isfinite(torch.stack([losses[i].detach() for i in scored])).tolist()
        self.frozen.update(index for index, ok in zip(scored, finite, strict=True) if not ok)
        live = [losses[i] for i in scored if i not in self.frozen]
        if not live:
            self.trainer.should_stop = True
            return torch.zeros((), device=self.device)
        total = torch.stack(live).sum()
        self.manual_backward(total)
        counted = False  # Lightning counts each optimiser step: one per batch, as a serial run
        for index, optimizer in enumerate(self._optimizers()):
            if index not in self.frozen:
                if counted:  # its trainer.global_step (max_steps ...), not one per member
                    self.trainer.strategy.optimizer_step(optimizer.optimizer, lambda: None)
                else:
                    optimizer.step()
                counted = True
            optimizer.zero_grad(set_to_none=True)
        return total.detach()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._scored(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._scored(batch, "test")

    def _optimizers(self) -> list[Any]:
        optimizers = self.optimizers()
        return optimizers if isinstance(optimizers, list) else [optimizers]

    def on_train_epoch_end(self) -> None:
        """Each active member's scheduler steps once per epoch, as Lightning steps a serial
        run's (manual optimisation leaves it to the module)."""
        schedulers = self.lr_schedulers()
        if schedulers is None:
            return
        if not isinstance(schedulers, list):
            schedulers = [schedulers]
        for index, scheduler in zip(self.scheduled, schedulers, strict=True):
            if index not in self.frozen:
                scheduler.step()

    def configure_optimizers(self) -> Any:
        """Every member's own optimiser (and scheduler), over its own parameters."""
        optimizers, schedulers = [], []
        self.scheduled: list[int] = []
        for index, member in enumerate(self.members):
            configured = member.configure_optimizers()
            if isinstance(configured, dict):
                optimizers.append(configured["optimizer"])
                schedulers.append(configured["lr_scheduler"])
                self.scheduled.append(index)
            else:
                optimizers.append(configured)
        return optimizers, schedulers

    def on_train_end(self) -> None:
        self.fused.sync_buffers()
