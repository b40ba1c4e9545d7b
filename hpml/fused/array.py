"""A fused training array as one LightningModule: N members of one family trained together.

Each member is an ordinary :class:`~hpml.models.base.HpmlModule` of its own job, its optimiser,
scheduler, loss and metrics unchanged. The forward pass is shared (one vmapped call over the
members' parameters, stacked for the fit); so is the loss where the members keep no metric
objects (one vmapped ``measure``); the losses are summed for one backward, each member getting
exactly its own gradient as no parameter is shared; the members' SGD or Adam steps run as one
update (:class:`~hpml.optimize.fuse.optim.FusedStep`), other optimisers member by member. So the
ops a step launches grow with N only in the members' metric updates and logging. Optimisation is
manual: Lightning's automatic loop drives one optimiser.

Metrics are logged as ``fused<i>/<stage>/<name>``; :func:`~hpml.fused.members.member_metrics`
files them in member i's run under ``<stage>/<name>``, as a serial run names them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.func import vmap
from torchmetrics import Metric

from hpml.errors import IncompatibleError
from hpml.models.base import ArrayModule, HpmlModule, Measured, log_measured
from hpml.names import member_prefix
from hpml.optimize.fuse.array import FusedNets, member_outputs
from hpml.optimize.fuse.optim import FusedStep, unfused_reason

log = logging.getLogger(__name__)


class FusedArray(ArrayModule):
    """``members`` trained as one array. Batches are one ``(x, y)`` every member sees
    (``shared_data``: their data and its order are the same) or a list with one ``(x, y)`` per
    member (their seeds differ).

    ``frozen`` holds the members done training (training loss no longer finite, or target
    reached): they no longer step, log nor validate, and are still tested, as a stopped serial
    job is. ``diverged``: member index -> the ``global_step`` when its training loss was first
    non-finite. Schedulers must step once per epoch without a metric."""

    def __init__(self, members: Sequence[HpmlModule], shared_data: bool = True) -> None:
        super().__init__()
        self.shared_data = shared_data
        self.members = torch.nn.ModuleList(members)
        self.fused = FusedNets([member.net for member in members])
        for member, net in zip(self.members, self.fused.nets, strict=True):
            member.net = net  # the same net, its LSTMs in vmappable form
        self.frozen: set[int] = set()
        self.diverged: dict[int, int] = {}
        self.scheduled: list[int] = []  # the members with a scheduler, in Lightning's order
        self.fused_step: FusedStep | None = None  # None: the members' optimisers step in turn
        # members keeping no metric object score as one vmapped measure (HpmlModule.measure
        # updates nothing else); True until vmap fails on it
        self.vmapped_measure = not any(isinstance(m, Metric) for m in self.members.modules())
        self.automatic_optimization = False

    def forward(self, x: Any, stacked: bool = False) -> Any:
        return self.fused(x, stacked, keep=self.frozen)

    def _split(self, batch: Any) -> tuple[Any, list[Any]]:
        """The fused input (per member along dim 0 unless ``shared_data``) and each member's
        own batch."""
        if not self.shared_data:  # one (x, y) per member
            batches = [self.members[i]._formatted(b) for i, b in enumerate(batch)]
            return torch.stack([b[0] for b in batches]), batches
        shared = self.members[0]._formatted(batch)
        return shared[0], [shared] * len(self.members)

    def _scored(self, batch: Any, stage: str) -> tuple[list[int], Tensor]:
        """The members scored on ``batch`` (all in test, the unfrozen ones else: a frozen one's
        fit is over, its test is not) and their losses, stacked; each one's metrics logged."""
        x, batches = self._split(batch)
        output = self(x, not self.shared_data)
        scored = [i for i in range(len(self.members)) if i not in self.frozen or stage == "test"]
        measured, losses = self._measured(output, batches, stage, scored)
        for index, values in zip(scored, measured, strict=True):
            log_measured(self, values, stage, prefix=member_prefix(index))
        return scored, losses

    def _measured(
        self, output: Any, batches: list[Any], stage: str, scored: list[int]
    ) -> tuple[list[Measured], Tensor]:
        """What each of ``scored`` measures of its slice of ``output``, and their losses stacked:
        one vmapped ``measure`` for all where it runs so, else member by member."""
        if self.vmapped_measure:
            try:
                together = self._vmapped(output, batches, stage)
            except RuntimeError as exc:  # an op vmap cannot batch: member by member from now on
                log.info("fused array: the members' measure is scored one by one: %s", exc)
                self.vmapped_measure = False
            else:
                measured = [{name: v[index] for name, v in together.items()} for index in scored]
                losses = together["loss"]
                return measured, losses if len(scored) == len(losses) else losses[scored]
        outputs = member_outputs(output)
        measured = [
            self.members[index].measure(outputs[index], batches[index], stage) for index in scored
        ]
        return measured, torch.stack([values["loss"] for values in measured])

    def _vmapped(self, output: Any, batches: list[Any], stage: str) -> dict[str, Tensor]:
        """Member 0's ``measure`` over every member's output (and batch) at once: the members
        differ in no value it reads (``fuse.fusable``), and keep no metric object it updates."""
        measure = partial(self.members[0].measure, stage=stage)
        if self.shared_data:
            return vmap(partial(measure, batch=batches[0]))(output)
        return vmap(measure)(
            output, tuple(torch.stack(parts) for parts in zip(*batches, strict=True))
        )

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        if len(self.frozen) == len(self.members):  # min_epochs / min_steps keep the loop going
            self.trainer.should_stop = True
            return None
        scored, losses = self._scored(batch, "train")
        finite = torch.isfinite(losses.detach()).tolist()
        for index, ok in zip(scored, finite, strict=True):
            if not ok:
                self.frozen.add(index)
                self.diverged[index] = self.trainer.global_step
        live = [k for k, index in enumerate(scored) if index not in self.frozen]
        if not live:
            self.trainer.should_stop = True
            return None
        total = losses.sum() if all(finite) else losses[live].sum()
        self.manual_backward(total)
        optimizers = listed(self.optimizers())
        unused = self.fused_step is not None and not self.fused_step.steps
        if unused and (missing := self.fused.flat.missing_grads()):
            log.info(
                "fused array: parameter %s takes no part in the loss, and each member's optimiser "
                "skips it: the members' optimisers step one by one",
                missing[0],
            )
            self.fused_step = None
        if self.fused_step is not None:
            # Lightning counts the step (trainer.global_step) through one member's optimiser;
            # its parameters hold no gradient, so it moves none: the closure moves them all
            first = optimizers[scored[live[0]]]
            first.step(closure=partial(self.fused_step.step, set(self.frozen)))
        else:
            self._step_in_turn(optimizers)
        self.fused.flat.zero_grad()
        return total.detach()

    def _step_in_turn(self, optimizers: list[Any]) -> None:
        """Each live member's own optimiser steps, on its slice of the stacked gradients."""
        self.fused.flat.share_grads()
        counted = False  # Lightning counts each optimiser step: one per batch, as a serial run
        for index, optimizer in enumerate(optimizers):
            if index not in self.frozen:
                if counted:  # its trainer.global_step (max_steps ...), not one per member
                    self.trainer.strategy.optimizer_step(optimizer.optimizer, lambda: None)
                else:
                    optimizer.step()
                counted = True
            optimizer.zero_grad(set_to_none=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._scored(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._scored(batch, "test")

    def on_train_epoch_end(self) -> None:
        """Each active member's scheduler steps once per epoch, as Lightning steps a serial
        run's (manual optimisation leaves it to the module)."""
        for index, scheduler in zip(self.scheduled, listed(self.lr_schedulers()), strict=True):
            if index not in self.frozen:
                scheduler.step()

    def configure_optimizers(self) -> Any:
        """Every member's own optimiser (and scheduler), over its own parameters, which are
        stacked for the fit (:meth:`FusedNets.link`); SGD or Adam step as one."""
        optimizers, schedulers = [], []
        self.scheduled = []
        for index, member in enumerate(self.members):
            configured = member.configure_optimizers()
            if isinstance(configured, dict):
                optimizers.append(configured["optimizer"])
                schedulers.append(per_epoch(configured["lr_scheduler"], index))
                self.scheduled.append(index)
            else:
                optimizers.append(configured)
        flat = self.fused.link()
        reason = unfused_reason(optimizers, flat.params)
        self.fused_step = None if reason else FusedStep(optimizers, flat)
        if reason:
            log.info("fused array: the members' optimisers step one by one: %s", reason)
        return optimizers, schedulers

    def on_train_end(self) -> None:
        self.fused.sync_buffers()
        self.fused.unlink()


def listed(value: Any) -> list[Any]:
    """What Lightning's ``optimizers()`` or ``lr_schedulers()`` returns, as a list: it gives one
    alone, and None for no scheduler."""
    return [] if value is None else value if isinstance(value, list) else [value]


def per_epoch(scheduler: Any, member: int) -> Any:
    """``scheduler`` (an LR scheduler or Lightning's config dict of one) if it steps once per
    epoch without a metric, which is how :meth:`FusedArray.on_train_epoch_end` steps it."""
    config = scheduler if isinstance(scheduler, dict) else {"scheduler": scheduler}
    interval, frequency = config.get("interval", "epoch"), config.get("frequency", 1)
    name = type(config["scheduler"]).__name__
    if isinstance(config["scheduler"], torch.optim.lr_scheduler.ReduceLROnPlateau):
        reason = "it steps on a metric"
    elif interval != "epoch" or frequency != 1:
        reason = f"its interval is {interval!r} with frequency {frequency}"
    else:
        return scheduler
    raise IncompatibleError(
        f"member {member}'s scheduler {name} cannot be fused: {reason}, and a fused array steps "
        "each member's scheduler once per epoch without a metric"
    )
