"""What every hpml LightningModule shares: a net built from the data, optimiser from config.

Callbacks may use what these classes declare and nothing else: a model's ``net``,
``example_input(batch_size)`` and ``step_contexts`` (what its training steps run inside), a fused
array's ``members`` and ``frozen`` (:class:`ArrayModule`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, ExitStack
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import Metric

from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, IncompatibleError

Measured = dict[str, Tensor | Metric]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


class HpmlModule(L.LightningModule):
    """Base LightningModule: ``net`` is a partial that the family completes from ``data``.

    Families say which ``modality`` they eat, so a model given the wrong data fails at once with
    both names. ``channels_last`` stores 4-d weights and image batches NHWC, the layout oneDNN and
    cuDNN convolutions prefer.
    """

    modality: ClassVar[str]
    net: nn.Module
    step_contexts: list[Callable[[], AbstractContextManager[Any]]]
    """Entered around each training step, in order: a callback that changes how the step
    runs (activation checkpointing, bf16 saved tensors) adds one for the fit and removes it."""

    def __init__(
        self,
        net: Callable[..., nn.Module],
        data: DataSpec,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if data.modality != self.modality:
            raise IncompatibleError(
                f"model {type(self).__name__} needs {self.modality} data, but the data gives "
                f"{data.modality}; choose a data config with {self.modality} samples"
            )
        self.save_hyperparameters(logger=False, ignore=["net"])
        if channels_last and len(data.input_shape) != 3:
            raise ConfigError(
                "channels_last", channels_last, f"false for {data.modality} data (images only)"
            )
        self.data_spec = data
        self.step_contexts = []
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        try:
            self.net = self.build_net(net, data)
        except ConfigError as exc:  # the net's own keys live under model.net
            raise exc.under("net") from exc
        if channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Any:
        return self.net(x)

    def measure(self, output: Any, batch: tuple[Tensor, Tensor], stage: str) -> Measured:
        """The loss (key ``loss``) and the family's other metrics of ``output``, the net's
        output on ``batch``; metric objects are updated here. Apart from the forward pass so a
        fused array (:mod:`hpml.fused.array`) scores each member's slice of one vmapped call."""
        raise NotImplementedError

    def measured(self, batch: tuple[Tensor, Tensor], stage: str) -> Measured:
        """What :meth:`measure` gives of the net's forward pass on ``batch``, logging nothing
        (a callback measuring a changed net reads it so)."""
        batch = self._formatted(batch)
        return self.measure(self(batch[0]), batch, stage)

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        """Loss of one batch, logging what :meth:`measure` gives as ``<stage>/<name>``."""
        measured = self.measured(batch, stage)
        log_measured(self, measured, stage)
        return measured["loss"]

    def _formatted(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """The batch with its inputs in the net's memory format (a no-op unless channels_last)."""
        x, y = batch
        return x.contiguous(memory_format=self.memory_format), y

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        with ExitStack() as stack:
            for context in self.step_contexts:
                stack.enter_context(context())
            return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "test")

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """A batch of the data's shape and dtype, for analysis passes."""
        dtype = torch.long if self.data_spec.modality == "tokens" else torch.float32
        example = torch.zeros(
            batch_size, *self.data_spec.input_shape, dtype=dtype, device=self.device
        )
        return example.contiguous(memory_format=self.memory_format)

    def configure_optimizers(self) -> Any:
        optimizer = self.hparams.optimizer(self.parameters())
        if self.hparams.scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.hparams.scheduler(optimizer)}


class ArrayModule(L.LightningModule):
    """A fused array of :class:`HpmlModule` members (:class:`hpml.fused.array.FusedArray`), as
    callbacks see it: its ``members`` and the indices of those done training (``frozen``)."""

    members: nn.ModuleList
    frozen: set[int]

    def example_input(self, batch_size: int = 1) -> Tensor:
        """A batch of the members' data's shape and dtype."""
        return self.members[0].example_input(batch_size)


def log_measured(
    module: L.LightningModule, measured: Measured, stage: str, prefix: str = ""
) -> None:
    """Log each of ``measured`` as ``<prefix><stage>/<name>``, per epoch; loss and accuracy also
    on the progress bar. Metric objects sync themselves under DDP, tensors are synced here."""
    for name, value in measured.items():
        module.log(
            f"{prefix}{stage}/{name}",
            value,
            on_step=False,
            on_epoch=True,
            sync_dist=not isinstance(value, Metric),
            prog_bar=not prefix and name in ("loss", "acc"),
        )
