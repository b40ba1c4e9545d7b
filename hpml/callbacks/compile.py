"""When to compile: after fit, before test, so the test stage runs (and times) the compiled model.

How is up to ``hpml.optimize.compile``. A copy of the eager model is compiled for batch 1 and
batch N (``latency_batch_size``; ``channels_last`` converts the module it is given in place, so
the eager net stays as it was), checked against eager, and the two are timed side by side:

=========================================  ===============================================
``compile_{before,after}/size_bytes``      saved state dict; after: the saved TorchScript
                                           file or exported program where there is one
``compile_{before,after}/latency_b1_ms``   median forward time at batch 1, eager / compiled,
``compile_{before,after}/latency_bN_ms``   and at batch N, over ``latency_rounds`` rounds of
                                           both sides; ``..._iqr_ms`` beside each
``compile/speedup_b{1,N}_x``               median of the per-round ratios eager / compiled,
                                           ``_ci_low_x``, ``_ci_high_x``, ``_rounds_count``
``compile_{before,after}/val_acc_pct``     top-1 accuracy, percent, on ``eval_batches`` val batches
``compile_{before,after}/val_loss_nats``   mean loss per sample on them (``validation_step``'s)
``compile/time_s``                         seconds compiling (first calls per shape included),
                                           never part of any latency or throughput
``compile/output_diff_max_abs``            largest |compiled - eager| output on the examples
=========================================  ===============================================

Tags: ``hpml.verdict.compile.speedup_b{1,N}`` (``faster``, ``slower``, ``within noise``),
``hpml.compare.compile.devices``, ``hpml.compile.method``, ``hpml.compile.mode``,
``hpml.compile.device``, ``hpml.compile.conv_kernel`` (the convolution operators the compiled
module calls, comma-separated, ``none`` without convolutions; on CPU with ``freezing`` the fast
path is ``mkldnn::_convolution_pointwise``, and a compiled graph that calls anything else is
one log line) and, for torch.compile, ``hpml.compile.cache_dir`` (``cache_dir``: per run under
the run's output dir by default). ``export`` saves the program as the artifact
``compile/model.pt2``.

Never slower by default: when a batch size's verdict is ``slower``, the run says so in one line
and keeps the eager model (``hpml.compile.deployed``: ``eager``, else the method) for the test
stage and whatever is logged after; ``force=true`` deploys the compiled model anyway. The test
stage's throughput then measures the deployed model after its warm-up steps; the compile already
happened here.

With ``train=true`` the training step is compiled too (``hpml.optimize.compile.training``, always
``torch.compile`` with ``mode``, ``dynamic`` and ``fullgraph``): at train start, before any epoch
is timed, the net is compiled and warmed up (forward and backward) on each batch size the
training loader yields, under the trainer's autocast; those seconds are ``train/compile_time_s``
(tag ``hpml.compile.train``). Then eager and compiled training steps (forward and backward) are
timed side by side (``compile/train_speedup_x`` with ``_ci_low_x``, ``_ci_high_x``,
``_rounds_count``): unless that verdict is ``faster`` (or ``force=true``), the run says so in one
line with the ratio and trains eagerly (``hpml.compile.train``: ``eager``, else ``compiled``).
The compiled module is swapped in for each training batch only, so
everything else sees the eager net: FLOPs counted on one sample, validation, checkpoints (no
``_orig_mod.`` keys) and the compile after fit. The memory breakdown's first step is a compiled
step: its activations are what the compiled graph saves for backward.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from hpml.analysis.compare import Timing, compare_forward
from hpml.analysis.stats import FASTER, SLOWER
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_file, log_metrics, set_tags
from hpml.callbacks.measure import (
    Side,
    compare,
    latency_metrics,
    on_trainer_device,
)
from hpml.callbacks.measure_settings import (
    LATENCY_BUDGET_S,
    LATENCY_CI_WIDTH,
    LATENCY_CLOCK,
    LATENCY_MIN_RUN_TIME_S,
    LATENCY_ROUNDS,
    Budget,
    Clock,
    RunTime,
    Settings,
    Width,
)
from hpml.errors import ConfigError, IncompatibleError
from hpml.names import COUNT, S, X, metric
from hpml.optimize.compile import METHODS, MODES, Compiled, compile_model, fast_path
from hpml.optimize.compile.training import compile_for_training, training_speedup
from hpml.ranges import Count

BEFORE, AFTER = "compile_before", "compile_after"
AUTO, EAGER = "auto", "eager"
# torch_compile last: it resets dynamo
CANDIDATES = (EAGER, "torchscript", "export", "aot_inductor", "torch_compile")
log = logging.getLogger(__name__)


class Compile(L.Callback):
    """Compile the LightningModule's ``net`` with ``method`` after fit (see the module)."""

    # in a fused array: it compiles the one net it is given: an array trains plain nets
    in_array: ClassVar[InArray] = InArray.SERIAL

    def __init__(
        self,
        method: str,
        mode: str = "default",
        dynamic: bool | None = None,
        fullgraph: bool = False,
        tolerance: float = 1e-3,
        latency_batch_size: int = 64,
        latency_rounds: Count = LATENCY_ROUNDS,
        latency_min_run_time_s: RunTime = LATENCY_MIN_RUN_TIME_S,
        latency_budget_s: Budget = LATENCY_BUDGET_S,
        latency_ci_width: Width = LATENCY_CI_WIDTH,
        latency_clock: Clock = LATENCY_CLOCK,
        eval_batches: int | None = 4,
        train: bool = False,
        freezing: bool = False,
        channels_last: bool = False,
        force: bool = False,
        cache_dir: str | None = None,
        candidates: Sequence[str] = CANDIDATES,
    ) -> None:
        if method not in (*METHODS, AUTO):
            raise ConfigError("method", method, f"one of {', '.join((*METHODS, AUTO))}")
        for name in candidates:
            if name not in (EAGER, *METHODS):
                raise ConfigError("candidates", name, f"each one of {', '.join((EAGER, *METHODS))}")
        self.candidates = tuple(candidates)
        if mode not in MODES:
            raise ConfigError("mode", mode, f"one of {', '.join(MODES)}")
        self.method, self.mode, self.dynamic, self.fullgraph = method, mode, dynamic, fullgraph
        self.tolerance = tolerance
        self.settings = Settings.checked(
            latency_batch_size,
            latency_rounds,
            latency_min_run_time_s,
            eval_batches,
            latency_budget_s,
            latency_ci_width,
            latency_clock,
        )
        self.done = False
        self.compile_train = train
        self.freezing, self.channels_last = freezing, channels_last
        self.force = force
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.train_net: nn.Module | None = None  # compiled for training, shares the parameters
        self.eager_net: nn.Module | None = None  # put back after each training batch
        self.compiled_of: nn.Module | None = None  # the eager net train_net compiles

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.compile_train or self.train_net is not None:
            return
        examples = [pl_module.example_input(b) for b in _train_batch_sizes(trainer)]
        self.compiled_of = pl_module.net
        self.train_net, seconds = compile_for_training(
            pl_module.net,
            examples,
            Path(trainer.default_root_dir) / "compile" / "train",
            self.mode,
            self.dynamic,
            self.fullgraph,
            trainer.precision_plugin.train_step_context,
            self.cache_dir,
        )
        ratio = training_speedup(
            pl_module.net,
            self.train_net,
            examples[0],
            trainer.precision_plugin.train_step_context,
            self.settings.plan,
        )
        i = ratio.interval
        log_metrics(
            trainer,
            {
                metric("train", "compile_time", S): seconds,
                metric("compile", "train_speedup", X): i.median,
                metric("compile", "train_speedup_ci_low", X): i.low,
                metric("compile", "train_speedup_ci_high", X): i.high,
                metric("compile", "train_speedup_rounds", COUNT): float(i.n),
            },
        )
        keep = self.force or ratio.verdict == FASTER
        if not keep:
            log.warning(
                f"compile.train: a compiled training step is not faster than eager here "
                f"({ratio.describe()}, eager / compiled); training eagerly "
                f"(compile.force=true trains compiled anyway)"
            )
            self.train_net = None
        set_tags(
            trainer,
            {
                "hpml.compile.train": "compiled" if keep else "eager",
                "hpml.compile.mode": self.mode,
            },
        )

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.train_net is None:
            return
        if pl_module.net is not self.compiled_of:
            # replaced mid-training (QAT's prepare, physical pruning): train that net eagerly
            rank_zero_warn("compile.train: the net was replaced during training; it runs eager")
            self.train_net = None
            return
        self.eager_net, pl_module.net = pl_module.net, self.train_net

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._put_back_eager(pl_module)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._put_back_eager(pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._put_back_eager(pl_module)
        self.train_net = self.compiled_of = None

    def _put_back_eager(self, pl_module: L.LightningModule) -> None:
        if self.eager_net is not None:
            pl_module.net, self.eager_net = self.eager_net, None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            on_trainer_device(trainer, pl_module)  # teardown left it on the CPU
            self._compile(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            self._compile(trainer, pl_module)

    def variant(
        self, eager: nn.Module, examples: list[Any], workdir: Path, method: str | None = None
    ) -> Compiled:
        """``eager`` compiled by ``method`` (default: this callback's) and its options (a copy:
        channels_last converts the net it is given in place)."""
        return compile_model(
            copy.deepcopy(eager),
            method or self.method,
            examples,
            workdir,
            self.mode,
            self.dynamic,
            self.fullgraph,
            self.tolerance,
            self.freezing,
            self.channels_last,
            self.cache_dir,
        )

    def _choose(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        eager: nn.Module,
        examples: list[Any],
        workdir: Path,
    ) -> Compiled:
        """``compile=auto``: every candidate that compiles and matches eager within
        ``tolerance`` (a failing one is left out in one line), timed side by side at batch N;
        the fastest median on the rounds' clock is returned, each candidate's latency logged
        (``compile_auto/<candidate>_latency_bN_ms``, ``_iqr_ms``; tags
        ``hpml.compile.auto.choice``, ``hpml.compile.auto.candidates``) and the choice said in
        one line."""
        built = {EAGER: Compiled(eager, EAGER, 0.0, 0.0)} if EAGER in self.candidates else {}
        for name in self.candidates:
            if name == EAGER:
                continue
            try:
                built[name] = self.variant(eager, examples, workdir / name, name)
            except IncompatibleError as exc:
                log.warning(f"compile=auto: {name} left out: {exc}")
        if not built:
            raise IncompatibleError(
                f"compile=auto: no candidate of {', '.join(self.candidates)} compiled "
                f"{type(eager).__name__}"
            )
        batch = self.settings.batch_size
        example = pl_module.example_input(batch).to(pl_module.device)
        timings = compare_forward(
            {name: (c.module, example) for name, c in built.items()}, self.settings.plan
        )
        choice = min(timings, key=lambda name: timings[name].median_ms)
        metrics: dict[str, float] = {}
        for name, timing in timings.items():
            metrics |= latency_metrics("compile_auto", f"{name}_latency_b{batch}", timing)
        log_metrics(trainer, metrics)
        set_tags(
            trainer,
            {"hpml.compile.auto.choice": choice, "hpml.compile.auto.candidates": ",".join(built)},
        )
        others = "; ".join(f"{n} {_median_iqr(t)}" for n, t in timings.items() if n != choice)
        log.info(  # the choice asked for: said, not warned
            f"compile=auto: deploying {choice}, the fastest at batch {batch}: "
            f"{_median_iqr(timings[choice])}; {others or 'no other candidate'}"
        )
        return built[choice]

    def _compile(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = pl_module.device
        eager = pl_module.net.eval()
        workdir = Path(trainer.default_root_dir) / "compile"
        sizes = (1, self.settings.batch_size)
        examples = [pl_module.example_input(b).to(device) for b in sizes]
        if self.method == AUTO:
            compiled = self._choose(trainer, pl_module, eager, examples, workdir)
        else:
            compiled = self.variant(eager, examples, workdir)
        kernels = compiled.conv_kernels
        if self.freezing and device.type == "cpu" and kernels and not fast_path(kernels):
            log.warning(
                f"compile: the compiled graph calls {', '.join(kernels)}, not the pre-packed "
                f"fast path mkldnn::_convolution_pointwise (freezing did not apply)"
            )
        comparison = compare(
            trainer,
            pl_module,
            self.settings,
            "compile",
            Side(BEFORE, eager, device),
            Side(AFTER, compiled.module, device, compiled.size_bytes),
        )
        slower = slower_batches(comparison.tags)
        deploy = self.force or not slower
        if deploy:
            pl_module.net = compiled.module
        else:
            ratios = ", ".join(
                f"{comparison.metrics[metric('compile', f'speedup_b{b}', X)]:.2f}x at batch {b}"
                for b in slower
            )
            log.warning(
                f"compile: {compiled.method} is slower than eager ({ratios}, eager / compiled, "
                f"verdict slower); keeping the eager model (compile.force=true deploys it anyway)"
            )
        self.done = True
        comparison.log(
            trainer,
            {
                metric("compile", "time", S): compiled.seconds,
                metric("compile", "output_diff", "max_abs"): compiled.max_abs_diff,
            },
        )
        tags = {
            "hpml.compile.method": self.method,
            "hpml.compile.device": str(device),
            "hpml.compile.conv_kernel": ",".join(kernels) or "none",
            "hpml.compile.deployed": compiled.method if deploy else EAGER,
        }
        if "torch_compile" in (self.method, compiled.method):
            tags |= {
                "hpml.compile.mode": self.mode,
                "hpml.compile.freezing": str(self.freezing).lower(),
                "hpml.compile.channels_last": str(self.channels_last).lower(),
                "hpml.compile.cache_dir": str(self.cache_dir or workdir / "inductor_cache"),
            }
        set_tags(trainer, tags)
        if compiled.artifact is not None:
            log_file(trainer, compiled.artifact, "compile")


def _median_iqr(timing: Timing) -> str:
    return f"{timing.median_ms:.3g} ms (IQR {timing.iqr_ms:.2g}, n={timing.n})"


def slower_batches(tags: dict[str, str]) -> list[int]:
    """The batch sizes whose speed-up verdict (``hpml.verdict.compile.speedup_b<N>``) is slower."""
    prefix = "hpml.verdict.compile.speedup_b"
    return [int(k[len(prefix) :]) for k, v in tags.items() if k.startswith(prefix) and v == SLOWER]


def _train_batch_sizes(trainer: L.Trainer) -> list[int]:
    """The loader's batch size, and the last batch's where the dataset leaves a smaller one."""
    loader = trainer.train_dataloader
    size = getattr(loader, "batch_size", None) or 1
    samples = len(getattr(loader, "dataset", ()))
    last = samples % size if samples and not getattr(loader, "drop_last", False) else 0
    return [size, last] if last else [size]
