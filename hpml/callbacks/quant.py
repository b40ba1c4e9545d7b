"""When to quantise: after fit for post-training methods, around a final fine-tune for QAT.

Quantisers change the net they are given, so this keeps a float copy and measures both side by
side; int8 kernels exist for CPU only, so a GPU run evaluates the quantised net on CPU and tags
why. Metrics, tags and artifacts: docs/quantisation-compilation.md.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

import lightning as L
import torch
from torch import nn

from hpml.callbacks.logging import log_text, mlflow_loggers, set_step_tags
from hpml.callbacks.measure import Side, compare, on_trainer_device
from hpml.callbacks.measure_settings import OptimizationStep, built
from hpml.errors import ConfigError, IncompatibleError, non_negative_int, positive_int
from hpml.names import AFTER, BEFORE, S, metric, side
from hpml.optimize.quant import OnDevice, Quantizer, apply_quant
from hpml.optimize.quant.base import no_calibration
from hpml.tensors import first_tensor


def requested_device(trainer: L.Trainer, pl_module: L.LightningModule) -> torch.device:
    """The device the trainer runs the model on: where a variant should be evaluated."""
    return pl_module.device


def choose_device(
    requested: torch.device,
    quantizer: Quantizer,
    cuda_available: Callable[[], bool] = torch.cuda.is_available,
) -> tuple[torch.device, str | None]:
    """Where the quantised model runs, and why it is not ``requested`` when it is not."""
    if requested.type != "cuda":
        return requested, None
    cpu = torch.device("cpu")
    if not quantizer.cuda_capable:
        return cpu, (
            f"{quantizer.name} ({quantizer.backend}) kernels run on CPU only: "
            f"evaluated on cpu instead of {requested}"
        )
    if not cuda_available():
        return cpu, f"{requested} was requested but CUDA is not available: evaluated on cpu"
    return requested, None


class Quantize(OptimizationStep):
    """Quantise the LightningModule's ``net`` by ``method`` (see the module).

    Args:
        method: the :class:`~hpml.optimize.quant.Quantizer`, or what builds it (its option's
            ``_partial_`` ``method`` node, so a refused knob is named ``quant.method.<knob>``);
            runs record its name as the param ``quant.method``.
        calibration_batches: training batches a calibrated method observes.
        qat_epochs: the last epochs of fit that QAT fine-tunes with fake quantisation.
        **measure: the knobs of :class:`~hpml.callbacks.measure_settings.OptimizationStep`.
    """

    stage, under_ddp = "quant", "a post-training method"

    def __init__(
        self,
        method: Quantizer | Callable[[], Quantizer],
        calibration_batches: int = 8,
        qat_epochs: int = 1,
        **measure: Any,
    ) -> None:
        super().__init__(**measure)
        self.quantizer = built(method, Quantizer)
        self.calibration_batches = non_negative_int("calibration_batches", calibration_batches)
        if self.needs_calibration_data and calibration_batches == 0:
            raise no_calibration()
        self.qat_epochs = positive_int("qat_epochs", qat_epochs)
        self.float_net: nn.Module | None = None  # kept until timed beside the quantised one
        self.before_device: torch.device | None = None
        self.done = False

    # what the quantiser declares: one that trains swaps in its prepared net during fit
    replaces_net_during_fit = property(lambda self: self.quantizer.trains)
    safe_under_ddp = property(lambda self: not self.quantizer.trains)
    needs_calibration_data = property(lambda self: self.quantizer.needs_calibration)
    moves_to_another_device = property(lambda self: not self.quantizer.cuda_capable)

    @property
    def knob(self) -> tuple[str, str]:
        return "method", self.quantizer.name

    def check_model(
        self,
        pl_module: L.LightningModule,
        build_net: Callable[[], nn.Module],
        input_shape: Sequence[int],
        name: str,
    ) -> None:
        """The quantiser has layers to quantise, inputs it can quantise and kernels for the net
        (``build_net()``: a real CPU net, built once if asked for)."""
        q = self.quantizer
        try:
            q.check(pl_module.net)
            q.check_inputs(pl_module.net, pl_module.example_input(1))
            q.check_net(functools.cache(build_net), torch.rand(2, *input_shape), name)
        except ConfigError as exc:
            raise exc.under("method").under("quant") from None  # the method's knobs

    # -- when ---------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Fail before training when the model has nothing this method can quantise, and pick
        the engine for this net where the backend is ``auto``."""
        if self.done or self.before_device is not None:
            return
        q = self.quantizer
        q.check(pl_module.net)
        q.check_inputs(pl_module.net, pl_module.example_input(1))
        example = torch.rand_like(pl_module.example_input(2).cpu().float())
        self.quantizer = q = q.for_net(pl_module.net, example)
        set_step_tags(trainer, "quant", {"method": q.name, "backend": q.backend})
        for logger in mlflow_loggers(trainer):  # as prune.method: the name the config leaves out
            logger.log_hyperparams({"quant.method": q.name})

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.quantizer.trains or self.before_device is not None:
            return
        max_epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else 1
        if trainer.current_epoch < max(0, max_epochs - self.qat_epochs):
            return
        self._keep_float(pl_module)
        pl_module.net = self.quantizer.prepare_qat(pl_module.net, pl_module.example_input(1))
        set_step_tags(trainer, "quant", {"qat_start_epoch": str(trainer.current_epoch)})

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            on_trainer_device(trainer, pl_module)  # teardown left it on the CPU
            self._quantize(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.done:
            return
        if self.quantizer.trains:
            raise IncompatibleError(
                f"quant={self.quantizer.name} fine-tunes during fit: run with fit=true"
            )
        self._quantize(trainer, pl_module)

    # -- what is measured ---------------------------------------------------------------------
    def _keep_float(self, pl_module: L.LightningModule) -> None:
        """A copy of the float net where it runs now: quantisers (and QAT's fine-tuning) change
        the net they are given, and the copy is the "before" side of the comparison."""
        self.before_device = pl_module.device
        self.float_net = copy.deepcopy(pl_module.net)

    def _calibration(self, trainer: L.Trainer) -> list[Any]:
        if not self.quantizer.needs_calibration:
            return []
        datamodule = trainer.datamodule
        try:
            loader = datamodule.train_dataloader()
        except ConfigError:  # test-only runs: the training split was never set up
            datamodule.setup("fit")
            loader = datamodule.train_dataloader()
        return [first_tensor(b) for b in islice(loader, self.calibration_batches)]

    def _quantize(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        q = self.quantizer
        if self.float_net is None:
            self._keep_float(pl_module)
        float_net, self.float_net = self.float_net, None
        assert float_net is not None and self.before_device is not None  # kept just above
        device, reason = choose_device(requested_device(trainer, pl_module), q)
        if not q.trains:  # torch.ao QAT converts to CPU kernels where the net is
            pl_module.net.to(device)
        applied = apply_quant(pl_module.net, q, self._calibration(trainer))
        qnet, compile_time_s = applied.module, applied.report
        before = Side(side("quant", BEFORE), float_net, self.before_device)
        after = Side(side("quant", AFTER), qnet, device)
        comparison = compare(trainer, pl_module, self.settings, "quant", before, after)
        extra = {}
        if compile_time_s is not None:
            extra[metric("quant", "compile_time", S)] = compile_time_s
        pl_module.net = qnet if device == pl_module.device else OnDevice(qnet, device)
        self.done = True
        comparison.log(trainer, extra)
        tags = {"device_before": str(self.before_device), "device_after": str(device)}
        if reason:
            tags["fallback"] = reason
        set_step_tags(trainer, "quant", tags)
        log_text(trainer, str(qnet), "quant/architecture_after.txt")
