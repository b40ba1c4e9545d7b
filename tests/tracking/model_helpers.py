"""A net no format can hold, swapped in after test, for the failure path of ``logger.log_model``."""

from __future__ import annotations

import lightning as L
from torch import Tensor, nn


class Unserialisable(nn.Module):
    """Runs like the net it wraps, but torch.export cannot take its branch on the data and
    pickle refuses it."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: Tensor) -> object:
        return self.net(x if x.sum() >= 0 else -x)

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("Unserialisable cannot be pickled")


class SwapInUnserialisable(L.Callback):
    """Wraps ``pl_module.net`` in :class:`Unserialisable` once test has ended."""

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.net = Unserialisable(pl_module.net)
