"""The data of a fused array: one loader every member reads, or one per member.

Members whose data configs are equal (a sweep over learning rate, weight decay, ...) read the
same batches, as each would alone: one loader, its batch handed to every member. Members that
differ in their seed differ in their data order too (and, for generated data, in the data), as
their serial twins would: one loader each, zipped, each step a list of one batch per member.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partialmethod
from typing import Any

import lightning as L
from lightning.pytorch.utilities import CombinedLoader

from hpml.data.base import HpmlDataModule


class FusedData(L.LightningDataModule):
    """``members``: each member's data module, or one shared by all (``shared``)."""

    def __init__(self, members: Sequence[HpmlDataModule], shared: bool) -> None:
        super().__init__()
        self.members = list(members[:1] if shared else members)
        self.shared = shared

    def setup(self, stage: str) -> None:
        for member in self.members:
            member.trainer = self.trainer  # each places its samples for the array's device
            member.setup(stage)

    def _loader(self, split: str) -> Any:
        loaders = [getattr(member, f"{split}_dataloader")() for member in self.members]
        if self.shared:
            return loaders[0]
        return CombinedLoader(loaders, mode="min_size")

    train_dataloader = partialmethod(_loader, "train")
    val_dataloader = partialmethod(_loader, "val")
    test_dataloader = partialmethod(_loader, "test")
