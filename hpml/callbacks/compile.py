"""When to compile: after fit, before test, so the test stage runs (and times) the compiled model.

How is :func:`hpml.optimize.compile.apply_compile`'s. Where a batch size's verdict is
``slower``, the run keeps the eager model and says so in one line (``force=true`` deploys the
compiled one anyway).

``compile.train=true`` also compiles the training step, kept only where it is faster: at train
start the net is compiled, warmed up and timed side by side with eager steps; unless that verdict
is ``faster`` (or ``force``), the run trains eagerly. The compiled module serves training batches
only, so everything else sees the eager net. Metrics, tags and artifacts:
docs/quantisation-compilation.md.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from hpml.analysis.compare import Timing, compare_forward
from hpml.analysis.stats import FASTER, SLOWER
from hpml.callbacks.logging import log_file, log_metrics, set_step_tags
from hpml.callbacks.measure import (
    Side,
    compare,
    latency_metrics,
    on_trainer_device,
    speedup_metrics,
)
from hpml.callbacks.measure_settings import OptimizationStep
from hpml.errors import ConfigError, IncompatibleError, one_of
from hpml.names import AFTER, BEFORE, S, X, metric, side, verdict_tag
from hpml.optimize import Applied
from hpml.optimize.compile import (
    UNKNOWN,
    Compiled,
    Method,
    apply_compile,
    compiler,
    fast_path,
    knobs,
    method_class,
)
from hpml.optimize.compile.torch_compile import MODES
from hpml.optimize.compile.training import compile_for_training, training_speedup
from hpml.ranges import Positive

AUTO, EAGER = "auto", "eager"  # the method tag of compile=auto; the deployed tag of a kept net
log = logging.getLogger(__name__)


class Compile(OptimizationStep):
    """Compile the LightningModule's ``net`` with ``method`` after fit (see the module).

    Args:
        method: the :class:`~hpml.optimize.compile.Compiler` to use (its class, or a partial of
            it: the option's ``method._target_``), built with the knobs below it takes; None:
            the fastest of ``candidates``, measured side by side (``compile=auto``).
        candidates: methods as ``method``, weighed where ``method`` is None (``Eager`` among
            them: the net as it is); the other options give none.
        mode, dynamic, fullgraph: ``torch.compile``'s.
        tolerance: outputs must match eager within this times the largest eager output.
        train: also compile the training step (see the module).
        freezing: inductor's weight freezing (``torch_compile``, ``aot_inductor``).
        channels_last: NHWC weights and inputs (``torch_compile``).
        force: deploy the compiled model (and train compiled) even where it measured slower.
        cache_dir: inductor's cache (default: per run, under its output dir).
        **measure: the knobs of :class:`~hpml.callbacks.measure_settings.OptimizationStep`.
    """

    # every method replaces the parameters DDP wrapped; with ``train``, the net during fit too
    stage, under_ddp, safe_under_ddp = "compile", "compile=none", False
    replaces_net_during_fit = property(lambda self: self.compile_train)

    def __init__(
        self,
        method: Method | None,
        candidates: Sequence[Method],
        mode: str = "default",
        dynamic: bool | None = None,
        fullgraph: bool = False,
        tolerance: Positive = 1e-3,
        train: bool = False,
        freezing: bool = False,
        channels_last: bool = False,
        force: bool = False,
        cache_dir: str | None = None,
        **measure: Any,
    ) -> None:
        super().__init__(**measure)
        self.method_name = AUTO if method is None else method_class(method).name
        try:
            self.candidates = {method_class(c).name: c for c in candidates}
        except ConfigError as exc:
            raise ConfigError("candidates", exc.value, exc.expected) from exc
        if method is None and not candidates:
            raise ConfigError("candidates", [], "at least one method, with method null (auto)")
        self.method, self.mode, self.dynamic, self.fullgraph = method, mode, dynamic, fullgraph
        one_of("mode", mode, MODES)
        self.tolerance, self.done, self.compile_train = tolerance, False, train
        self.train_net: nn.Module | None = None  # compiled for training, shares the parameters
        self.eager_net: nn.Module | None = None  # put back after each training batch
        self.compiled_of: nn.Module | None = None  # the eager net train_net compiles
        self.freezing, self.channels_last, self.force = freezing, channels_last, force
        self.cache_dir = Path(cache_dir) if cache_dir else None

    @property
    def knob(self) -> tuple[str, str]:
        return ("train", "true") if self.compile_train else ("method", self.method_name)

    @property
    def options(self) -> dict[str, Any]:
        """The methods' knobs: each method takes those its constructor names."""
        names = ("mode", "dynamic", "fullgraph", "freezing", "channels_last", "cache_dir")
        return {name: getattr(self, name) for name in names}

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            on_trainer_device(trainer, pl_module)  # teardown left it on the CPU
            self._compile(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.done:
            self._compile(trainer, pl_module)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.compile_train or self.train_net is not None:
            return
        examples = [pl_module.example_input(b) for b in _train_batch_sizes(trainer)]
        context = trainer.precision_plugin.train_step_context
        self.compiled_of = pl_module.net
        self.train_net, seconds = compile_for_training(
            pl_module.net,
            examples,
            Path(trainer.default_root_dir) / "compile" / "train",
            self.mode,
            self.dynamic,
            self.fullgraph,
            context,
            self.cache_dir,
        )
        ratio = training_speedup(
            pl_module.net, self.train_net, examples[0], context, self.settings.plan
        )
        compile_time = {metric("train", "compile_time", S): seconds}
        log_metrics(trainer, compile_time | speedup_metrics("compile", "train_speedup", ratio))
        keep = self.force or ratio.verdict == FASTER
        if not keep:
            log.warning(
                f"compile.train: a compiled training step is not faster than eager here "
                f"({ratio.describe()}, eager / compiled); training eagerly "
                f"(compile.force=true trains compiled anyway)"
            )
            self.train_net = None
        trained = "compiled" if keep else "eager"
        set_step_tags(trainer, "compile", {"train": trained, "mode": self.mode})

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any
    ) -> None:
        if self.train_net is None:
            return
        if pl_module.net is not self.compiled_of:
            # replaced mid-training (QAT's prepare, physical pruning): train that net eagerly
            rank_zero_warn("compile.train: the net was replaced during training; it runs eager")
            self.train_net = None
            return
        self.eager_net, pl_module.net = pl_module.net, self.train_net

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._put_back_eager(pl_module)

    on_exception = on_train_batch_end  # a failed step leaves the eager net in place too

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._put_back_eager(pl_module)
        self.train_net = self.compiled_of = None

    def _put_back_eager(self, pl_module: L.LightningModule) -> None:
        if self.eager_net is not None:
            pl_module.net, self.eager_net = self.eager_net, None

    def variant(
        self, eager: nn.Module, examples: list[Any], workdir: Path, method: Method | None = None
    ) -> Applied[Compiled]:
        """``eager`` compiled by ``method`` (default: this callback's) and its options (a copy:
        channels_last converts the net it is given in place)."""
        return apply_compile(
            copy.deepcopy(eager),
            compiler(method or self.method, **self.options),
            examples,
            workdir,
            self.tolerance,
        )

    def _choose(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        eager: nn.Module,
        examples: list[Any],
        workdir: Path,
    ) -> Applied[Compiled]:
        """``compile=auto``: every candidate that compiles within ``tolerance`` (one that fails is
        left out in one line), timed side by side at batch N; the fastest median is deployed,
        each one's latency logged and the choice said in one line."""
        built = {}
        for name, method in self.candidates.items():
            try:
                built[name] = self.variant(eager, examples, workdir / name, method)
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
            {n: (c.module, example) for n, c in built.items()}, self.settings.plan
        )
        choice = min(timings, key=lambda name: timings[name].median_ms)
        metrics: dict[str, float] = {}
        for name in built:
            metrics |= latency_metrics("compile_auto", f"{name}_latency_b{batch}", timings[name])
        log_metrics(trainer, metrics)
        tags = {"auto.choice": choice, "auto.candidates": ",".join(built)}
        set_step_tags(trainer, "compile", tags)
        others = "; ".join(f"{n} {_median_iqr(timings[n])}" for n in built if n != choice)
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
        if self.method is None:
            applied = self._choose(trainer, pl_module, eager, examples, workdir)
        else:
            applied = self.variant(eager, examples, workdir)
        compiled = applied.report
        kernels = compiled.conv_kernels
        takes = knobs(self.method or self.candidates[compiled.method])  # the method compiled
        # freezing's fast path, where the method freezes and its kernels can be seen
        frozen = self.freezing and "freezing" in takes and device.type == "cpu"
        if frozen and kernels and UNKNOWN not in kernels and not fast_path(kernels):
            log.warning(
                f"compile: the compiled graph calls {', '.join(kernels)}, not the pre-packed "
                f"fast path mkldnn::_convolution_pointwise (freezing did not apply)"
            )
        before = Side(side("compile", BEFORE), eager, device)
        after = Side(side("compile", AFTER), applied.module, device, compiled.size_bytes)
        comparison = compare(trainer, pl_module, self.settings, "compile", before, after)
        slower = [
            b
            for b in self.settings.batch_sizes
            if comparison.tags[verdict_tag("compile", b)] == SLOWER
        ]
        deploy = self.force or not slower
        if deploy:
            pl_module.net = applied.module
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
            "method": self.method_name,
            "device": str(device),
            "conv_kernel": ",".join(kernels) or "none",
            "deployed": compiled.method if deploy else EAGER,
        }
        knob_tags = {
            "mode": self.mode,
            "freezing": str(self.freezing).lower(),
            "channels_last": str(self.channels_last).lower(),
            "cache_dir": str(self.cache_dir or workdir / "inductor_cache"),
        }
        tags |= {k: v for k, v in knob_tags.items() if k in takes}
        set_step_tags(trainer, "compile", tags)
        if compiled.artifact is not None:
            log_file(trainer, compiled.artifact, "compile")


def _median_iqr(timing: Timing) -> str:
    return f"{timing.median_ms:.3g} ms (IQR {timing.iqr_ms:.2g}, n={timing.n})"


def _train_batch_sizes(trainer: L.Trainer) -> list[int]:
    """The loader's batch size, and the last batch's where the dataset leaves a smaller one."""
    loader = trainer.train_dataloader
    size = getattr(loader, "batch_size", None) or 1
    samples = len(getattr(loader, "dataset", ()))
    last = samples % size if samples and not getattr(loader, "drop_last", False) else 0
    return [size, last] if last else [size]
