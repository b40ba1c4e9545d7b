"""What every hpml LightningModule shares: a net built from the data, optimiser from config."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor, nn

from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, IncompatibleError

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


class HpmlModule(L.LightningModule):
    """Base LightningModule: ``net`` is a partial that the family completes from ``data``.

    Families say which ``modality`` they eat, so a model given the wrong data fails at once
    with both names, not deep inside a forward pass.
    """

    modality: ClassVar[str]

    def __init__(
        self,
        net: Callable[..., nn.Module],
        data: DataSpec,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__()
        if data.modality != self.modality:
            raise IncompatibleError(
                f"model {type(self).__name__} needs {self.modality} data, but the data gives "
                f"{data.modality}; choose a data config with {self.modality} samples"
            )
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.data_spec = data
        try:
            self.net = self.build_net(net, data)
        except ConfigError as exc:  # the net's own keys live under model.net
            raise exc.under("net") from exc

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        raise NotImplementedError

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        """Loss of one batch, logging the family's metrics under ``stage``."""
        raise NotImplementedError

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "test")

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """A batch of the data's shape and dtype, for analysis passes."""
        dtype = torch.long if self.data_spec.modality == "tokens" else torch.float32
        return torch.zeros(batch_size, *self.data_spec.input_shape, dtype=dtype, device=self.device)

    def configure_optimizers(self) -> Any:
        optimizer = self.hparams.optimizer(self.parameters())
        if self.hparams.scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.hparams.scheduler(optimizer)}
