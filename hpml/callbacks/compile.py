"""When to compile: after fit, before test, so the test stage runs (and times) the compiled model.

How is up to ``hpml.optimize.compile``. The eager model is measured first, then compiled for batch
1 and batch N (``latency_batch_size``), checked against eager, and measured again:

=========================================  ===============================================
``compile_{before,after}/size_bytes``      saved state dict; after: the saved TorchScript
                                           file or exported program where there is one
``compile_{before,after}/latency_b1_ms``   median forward time at batch 1, eager / compiled,
``compile_{before,after}/latency_bN_ms``   and at batch N; ``..._p90_ms`` beside each
``compile_{before,after}/val_acc_pct``     top-1 accuracy, percent, on ``eval_batches`` val batches
``compile_{before,after}/val_loss_nats``   mean loss per sample on them (``validation_step``'s)
``compile/time_s``                         seconds compiling (first calls per shape included),
                                           never part of any latency or throughput
``compile/output_diff_max_abs``            largest |compiled - eager| output on the examples
=========================================  ===============================================

Tags: ``hpml.compile.method``, ``hpml.compile.mode``, ``hpml.compile.device`` and, for
torch.compile, ``hpml.compile.cache_dir`` (per run, under the run's output dir). ``export`` saves
the program as the artifact ``compile/model.pt2``. The test stage's throughput then measures the
compiled model after its warm-up steps; the compile already happened here.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L

from hpml.callbacks.logging import log_file, log_metrics, set_tags
from hpml.callbacks.measure import LATENCY_ROUNDS, LATENCY_WARMUP, Settings, measure
from hpml.errors import ConfigError
from hpml.names import S, metric
from hpml.optimize.compile import METHODS, MODES, compile_model

BEFORE, AFTER = "compile_before", "compile_after"


class Compile(L.Callback):
    """Compile the LightningModule's ``net`` with ``method`` after fit (see the module)."""

    def __init__(
        self,
        method: str,
        mode: str = "default",
        dynamic: bool | None = None,
        fullgraph: bool = False,
        tolerance: float = 1e-3,
        latency_batch_size: int = 64,
        latency_rounds: int = LATENCY_ROUNDS,
        latency_warmup: int = LATENCY_WARMUP,
        eval_batches: int | None = 4,
    ) -> None:
        if method not in METHODS:
            raise ConfigError("method", method, f"one of {', '.join(METHODS)}")
        if mode not in MODES:
            raise ConfigError("mode", mode, f"one of {', '.join(MODES)}")
        self.method, self.mode, self.dynamic, self.fullgraph = method, mode, dynamic, fullgraph
        self.tolerance = tolerance
        self.settings = Settings.checked(
            latency_batch_size, latency_rounds, latency_warmup, eval_batches
        )
        self.done = False

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            self._compile(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            self._compile(trainer, pl_module)

    def _compile(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = pl_module.device
        net = pl_module.net.eval()
        log_metrics(trainer, measure(trainer, pl_module, BEFORE, self.settings))
        workdir = Path(trainer.default_root_dir) / "compile"
        sizes = (1, self.settings.batch_size)
        compiled = compile_model(
            net,
            self.method,
            [pl_module.example_input(b).to(device) for b in sizes],
            workdir,
            self.mode,
            self.dynamic,
            self.fullgraph,
            self.tolerance,
        )
        after = measure(
            trainer,
            pl_module,
            AFTER,
            self.settings,
            compiled.module,
            size_bytes=compiled.size_bytes,
        )
        pl_module.net = compiled.module
        self.done = True
        log_metrics(
            trainer,
            after
            | {
                metric("compile", "time", S): compiled.seconds,
                metric("compile", "output_diff", "max_abs"): compiled.max_abs_diff,
            },
        )
        tags = {"hpml.compile.method": self.method, "hpml.compile.device": str(device)}
        if self.method == "torch_compile":
            tags |= {
                "hpml.compile.mode": self.mode,
                "hpml.compile.cache_dir": str(workdir / "inductor_cache"),
            }
        set_tags(trainer, tags)
        if compiled.artifact is not None:
            log_file(trainer, compiled.artifact, "compile")
