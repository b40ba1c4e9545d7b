"""When to quantise: after fit for post-training methods, around a final fine-tune for QAT.

How is up to the quantiser (``hpml.optimize.quant``): the config option's ``quantizer`` node, a
``_target_`` Hydra makes a partial of, called with the option's other keys (``method``,
``backend``, ``engine``, ...: the knobs of that quantiser). This callback keeps a copy of the
float model (quantisers change the net they are given), quantises, then times the two side by
side and judges both on the same batches and inputs. It logs (``N`` = ``latency_batch_size``):

=============================================  ================================================
``quant_before/size_bytes``                    saved state dict of the float model, bytes
``quant_after/size_bytes``                     the same for the quantised model
``quant_{before,after}/latency_b1_ms``         median forward time at batch 1 over
                                               ``latency_rounds`` rounds, each side once a round
``quant_{before,after}/latency_bN_ms``         the same at batch N; ``..._iqr_ms`` beside each
``quant/speedup_b{1,N}_x``                     median of the per-round ratios before / after,
                                               with ``_ci_low_x``, ``_ci_high_x`` (its
                                               interval) and ``_rounds_count`` (n)
``quant_{before,after}/val_acc_pct``           top-1 accuracy, percent, on ``eval_batches`` batches
``quant_{before,after}/val_loss_nats``         mean loss per sample on those batches (what the
                                               model's ``validation_step`` logs: a VAE's
                                               ``val_bce_nats``...)
``quant/compile_time_s``                       ``pt2e``: seconds of the first compiled call, apart
                                               from every latency (later shapes compile in warm-up)
=============================================  ================================================

Both sides are measured by :mod:`hpml.callbacks.measure`, as for pruning and compilation.

Tags: ``hpml.quant.method``, ``hpml.quant.backend`` (the engine chosen for the net when the config
says ``auto``: ``torch_ao`` or ``pt2e`` for static int8), ``hpml.quant.device_before``,
``hpml.quant.device_after``, and ``hpml.quant.fallback`` (why) when the quantised model runs on
CPU although the trainer asked for CUDA: torch.ao int8 kernels exist for CPU only, so such a model
is evaluated (and tested) on CPU instead of failing. Each side is then timed on its own device:
``hpml.compare.quant.devices`` reads ``cuda:0 vs cpu`` and the speed-up's log line says it is
across devices, not like for like. ``hpml.verdict.quant.speedup_b{1,N}``: ``faster``, ``slower``
or ``within noise``. The test stage then measures the quantised model: ``test/acc`` and
``model_final/size_bytes`` are its figures.

For ``qat`` the float model is copied (and its ``quant_before`` figures are that copy's) when fake
quantisation starts, ``qat_epochs`` before the end of fit (from the start when fit has no more
epochs than that); the trained net is converted after fit and timed beside the copy.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any, ClassVar

import lightning as L
import torch
from torch import nn

from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_text, set_tags
from hpml.callbacks.measure import (
    LATENCY_MIN_RUN_TIME_S,
    LATENCY_ROUNDS,
    Settings,
    Side,
    compare,
)
from hpml.errors import ConfigError, IncompatibleError, non_negative_int, positive_int
from hpml.names import S, metric
from hpml.optimize.quant import OnDevice, Quantizer, make_quantizer
from hpml.tensors import first_tensor

BEFORE, AFTER = "quant_before", "quant_after"


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
            f"{quantizer.method} ({quantizer.backend}) kernels run on CPU only: "
            f"evaluated on cpu instead of {requested}"
        )
    if not cuda_available():
        return cpu, f"{requested} was requested but CUDA is not available: evaluated on cpu"
    return requested, None


def built(quantizer: Callable[..., Quantizer], options: dict[str, Any]) -> Quantizer:
    """``quantizer(**options)``; a key it takes no argument for is refused naming the key."""
    try:
        params = inspect.signature(quantizer).parameters
    except (TypeError, ValueError):
        params = {}
    if params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        for key, value in options.items():
            if key not in params:
                name = getattr(quantizer, "func", quantizer)
                raise ConfigError(
                    key,
                    value,
                    f"an argument of {getattr(name, '__qualname__', name)} "
                    f"(it takes {', '.join(params)})",
                )
    return quantizer(**options)


class Quantize(L.Callback):
    """Quantise the LightningModule's ``net`` with ``quantizer(**options)`` (see the module).

    ``quantizer``: a class or function returning a :class:`~hpml.optimize.quant.Quantizer`
    (the option's ``_partial_`` node); without one, hpml's method called ``options["method"]``
    (:func:`~hpml.optimize.quant.make_quantizer`). ``options``: its knobs, ``method`` among them.
    """

    # in a fused array: it quantises the one net it is given: an array trains plain nets
    in_array: ClassVar[InArray] = InArray.SERIAL

    def __init__(
        self,
        quantizer: Callable[..., Quantizer] | None = None,
        calibration_batches: int = 8,
        qat_epochs: int = 1,
        latency_batch_size: int = 64,
        latency_rounds: int = LATENCY_ROUNDS,
        latency_min_run_time_s: float = LATENCY_MIN_RUN_TIME_S,
        eval_batches: int | None = 4,
        **options: Any,
    ) -> None:
        self.quantizer = (
            make_quantizer(**options) if quantizer is None else built(quantizer, options)
        )
        self.calibration_batches = non_negative_int("calibration_batches", calibration_batches)
        if self.quantizer.needs_calibration and calibration_batches == 0:
            raise ConfigError(
                "calibration_batches",
                0,
                "a positive integer: static int8 "
                "calibrates activation ranges on that many training batches",
            )
        self.qat_epochs = positive_int("qat_epochs", qat_epochs)
        self.settings = Settings.checked(
            latency_batch_size, latency_rounds, latency_min_run_time_s, eval_batches
        )
        self.float_net: nn.Module | None = None  # kept until timed beside the quantised one
        self.before_device: torch.device | None = None
        self.done = False

    def check_model(
        self,
        pl_module: L.LightningModule,
        build_net: Callable[[], nn.Module],
        input_shape: Sequence[int],
        name: str,
    ) -> None:
        """Before training, on the meta-built module (``build_net()``: a real CPU net, built
        once if asked for): the quantiser has layers to quantise, inputs it can quantise and
        kernels for the net (hpml.validate asks each step it builds)."""
        q = self.quantizer
        try:
            q.check(pl_module.net)
            q.check_inputs(pl_module.net, pl_module.example_input(1))
            q.check_net(functools.cache(build_net), torch.rand(2, *input_shape), name)
        except ConfigError as exc:
            raise exc.under("quant") from None

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
        set_tags(trainer, {"hpml.quant.method": q.method, "hpml.quant.backend": q.backend})

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.quantizer.trains or self.before_device is not None:
            return
        max_epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else 1
        if trainer.current_epoch < max(0, max_epochs - self.qat_epochs):
            return
        self._keep_float(pl_module)
        pl_module.net = self.quantizer.prepare_qat(pl_module.net, pl_module.example_input(1))
        set_tags(trainer, {"hpml.quant.qat_start_epoch": str(trainer.current_epoch)})

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            self._quantize(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.done:
            return
        if self.quantizer.trains:
            raise IncompatibleError(
                f"quant={self.quantizer.method} fine-tunes during fit: run with fit=true"
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
        if q.trains:
            qnet = q.convert(pl_module.net)  # torch.ao QAT converts to CPU kernels
        else:
            qnet = q.quantize(pl_module.net.to(device), self._calibration(trainer))
        comparison = compare(
            trainer,
            pl_module,
            self.settings,
            "quant",
            Side(BEFORE, float_net, self.before_device),
            Side(AFTER, qnet, device),
        )
        extra = {}
        if q.compile_time_s is not None:
            extra[metric("quant", "compile_time", S)] = q.compile_time_s
        pl_module.net = qnet if device == pl_module.device else OnDevice(qnet, device)
        self.done = True
        comparison.log(trainer, extra)
        tags = {
            "hpml.quant.device_before": str(self.before_device),
            "hpml.quant.device_after": str(device),
        }
        if reason:
            tags["hpml.quant.fallback"] = reason
        set_tags(trainer, tags)
        log_text(trainer, str(qnet), "quant/architecture_after.txt")
