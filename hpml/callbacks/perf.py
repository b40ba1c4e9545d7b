"""Throughput and step time with their spread, FLOP/s and MFU, data-wait share, epoch times, peak
memory, energy per sample, and whether other load made the timings noisy.

Lightning's ``Throughput`` computes each timed cycle's samples/s, FLOP/s and MFU; hpml adds the
median and IQR over cycles, step-time percentiles, data wait, CPU time, utilisation, two peaks,
the job over DDP ranks, the noise verdict (:mod:`hpml.callbacks.rates` says why) and joules.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from hpml import names
from hpml.analysis.memory import peak_memory_bytes, peak_rss_bytes, reset_peak_memory
from hpml.analysis.noise import NoiseProbe, NoiseRule, judge
from hpml.analysis.stats import cv_pct
from hpml.analysis.timing import StepTimer, synchronized_now
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.energy import StageEnergy
from hpml.callbacks.flop_budget import PEAKS, FlopBudget
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_metrics, set_tags
from hpml.callbacks.ranks import across_ranks
from hpml.callbacks.rates import Rates, cycle_rates
from hpml.models.base import HpmlModule
from hpml.names import BYTES, MS, PCT, SAMPLES_PER_S, S, metric
from hpml.ranges import Steps
from hpml.tensors import batch_size

log = logging.getLogger(__name__)


class PerformanceMonitor(HpmlCallback):
    """Speed, memory, FLOP/s and MFU of training and inference.

    Medians and IQRs over the timed steps after ``warmup_steps``, so one stalled step does not
    move the figure; the wait for each batch stays in the cycle. On a GPU every
    ``host_probe_every``-th timed step starts on an idle device, for the host's share of it
    (``<stage>/host_issue_pct``: :class:`~hpml.analysis.timing.Probe`). A noise probe spans every
    timed window and tags the run ``hpml.noisy`` by ``noise``'s limits. Under DDP the figures are
    the job's. Every metric, its unit and convention: docs/metrics.md.
    """

    in_array: ClassVar[InArray] = InArray.ONCE

    def __init__(
        self,
        warmup_steps: Steps = 3,
        inference_warmup_steps: Steps = 1,
        count_flops: bool = True,
        measured_peak: bool = True,
        peak_cache_dir: str | Path | None = None,
        noise: Mapping[str, float] | NoiseRule | None = None,
        host_probe_every: Steps = 10,
    ) -> None:
        self.warmup_steps = warmup_steps
        self.host_probe_every = host_probe_every
        self.inference_warmup_steps = inference_warmup_steps
        self.count_flops = count_flops
        self.budget = FlopBudget(measured_peak, Path(peak_cache_dir) if peak_cache_dir else None)
        self.energy = StageEnergy()
        self.timers: dict[str, StepTimer] = {}
        self.epoch_start: dict[str, float] = {}
        self.val_seconds_in_train_epoch = 0.0
        self.rule = noise if isinstance(noise, NoiseRule) else NoiseRule(**(noise or {}))
        self.probe = NoiseProbe()
        self.train_steps_s: list[float] = []  # every timed training step of the run, seconds
        # the training epoch's peak before a validation inside it reset the allocator's
        self.train_peak = 0
        self.noisy_reason: str | None = None

    def for_members(self, size: int) -> list[L.Callback]:
        """Itself, once for the array, leaving the FLOP count to each member's
        :class:`~hpml.callbacks.model_stats.MemberStats`."""
        self.count_flops = False
        return [self]

    def _start(self, stage: str, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = pl_module.device
        if stage == "train":
            self.train_peak = 0
        elif stage == "val" and trainer.state.fn == TrainerFn.FITTING:
            # Lightning validates inside the training epoch, before on_train_epoch_end: keep
            # the training steps' peak, which the reset below would otherwise lose
            self.train_peak = max(self.train_peak, peak_memory_bytes(device)[0])
        if self.count_flops and isinstance(pl_module, HpmlModule):
            self.budget.count(trainer, pl_module)
        reset_peak_memory(device)  # each stage's peak, not the peak since the process began
        warmup = self.warmup_steps if stage == "train" else self.inference_warmup_steps
        self.timers[stage] = StepTimer(device, warmup, self.host_probe_every)
        self.epoch_start[stage] = synchronized_now(device)
        self.energy.start(stage, pl_module)

    def _finish(
        self, stage: str, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> dict[str, float]:
        device = pl_module.device
        seconds = synchronized_now(device) - self.epoch_start[stage]
        seconds -= self.val_seconds_in_train_epoch if stage == "train" else 0.0  # not validation
        metrics = {metric(stage, "epoch_time", S): seconds}
        metrics |= self.energy.end(stage, trainer, pl_module, seconds, self.timers[stage].samples)
        stats = self.timers[stage].stats()
        if stats is not None and stage == "train":
            self.train_steps_s += self.timers[stage].step_seconds()
            metrics |= {
                metric(stage, "step_time_p50", MS): stats.step_p50_ms,
                metric(stage, "step_time_p90", MS): stats.step_p90_ms,
                metric(stage, "step_time_iqr", MS): stats.step_iqr_ms,
                metric(stage, "step_time_cv", PCT): stats.step_cv_pct,
                metric(stage, "step_cpu_time_p50", MS): stats.step_cpu_p50_ms,
                metric(stage, "utilisation", PCT): stats.utilisation_pct,
            }
        if stats is not None:  # what bounds every stage: hpml.callbacks.bound
            metrics[metric(stage, "data_wait", PCT)] = stats.data_wait_pct
        issue = self.timers[stage].host_issue_pct()
        if issue is not None:
            metrics[metric(stage, "host_issue", PCT)] = issue
        peak = peak_memory_bytes(device)[0]
        if stage == "train":  # its steps before and after any validation inside the epoch
            peak = max(peak, self.train_peak)
        metrics[metric(stage, "peak_memory", BYTES)] = peak
        if device.type == "cuda":
            metrics[metric(stage, "peak_rss", BYTES)] = peak_rss_bytes()
        # under DDP the job's figures: the slowest rank's times, the largest rank's memory,
        # the ranks' summed throughput, its IQR and FLOP/s (ranks step in lockstep, so their
        # per-step rates rise and fall together and the spreads add) and the ranks' mean
        # utilisation and MFU; the same two collectives on every rank
        utilisation_name = metric(stage, "utilisation", PCT)
        utilisation = metrics.pop(utilisation_name, None)
        metrics = across_ranks(trainer, metrics, "max")
        rates = self._rates(stage) if stats is not None else None
        summed = {
            "throughput": rates.samples_per_s if rates else 0.0,
            "iqr": rates.samples_iqr_per_s if rates else 0.0,
            "flops": (rates.flops_per_s or 0.0) if rates else 0.0,
            "utilisation": utilisation or 0.0,
        }
        # the same keys on every rank, whichever peaks it knows: one collective, like for like
        summed |= {kind: rates.mfu_pct.get(kind, 0.0) if rates else 0.0 for kind in PEAKS}
        summed = across_ranks(trainer, summed, "sum")
        if utilisation is not None:
            metrics[utilisation_name] = summed["utilisation"] / trainer.world_size
        throughput = summed["throughput"]
        if not throughput:
            return metrics
        metrics[metric(stage, "throughput", SAMPLES_PER_S)] = throughput
        metrics[metric(stage, "throughput_iqr", SAMPLES_PER_S)] = summed["iqr"]
        if trainer.world_size > 1:
            per_device = throughput / trainer.world_size
            metrics[metric(stage, "throughput_per_device", SAMPLES_PER_S)] = per_device
        return metrics | self.budget.metrics(stage, summed, trainer.world_size)

    def _rates(self, stage: str) -> Rates | None:
        """This rank's samples/s, FLOP/s and MFU over the stage's timed cycles."""
        timer = self.timers[stage]
        samples = timer.samples[timer.warmup :]
        flops, peaks = self.budget.per_sample.get(stage), self.budget.peaks
        return cycle_rates(samples, timer.cycle_seconds(), flops, peaks)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _, source = peak_memory_bytes(pl_module.device)
        set_tags(trainer, {names.PEAK_MEMORY_SOURCE_TAG: source})
        if self.probe.windows == 0:  # not yet measuring: the run's processes, for the probe
            self.probe = NoiseProbe(_run_pids(trainer))

    def _window_edge(self, stage: str) -> None:
        """Open the noise probe once the stage's timed window has begun (after warm-up)."""
        if self.timers[stage].window_start is not None:
            self.probe.open()

    def _noise(self, trainer: L.Trainer) -> None:
        """The run's noise shares so far, and its verdict by :func:`~hpml.analysis.noise.judge`:
        tags ``hpml.noisy`` (and ``hpml.noisy.reason``), and one line the first time it is."""
        shares = self.probe.shares()
        cv = cv_pct(self.train_steps_s) if self.train_steps_s else None
        metrics: dict[str, float] = {}
        if shares is not None:
            metrics[metric("noise", "other_cpu", PCT)] = shares.other_cpu_pct
            if shares.steal_pct is not None:
                metrics[metric("noise", "steal", PCT)] = shares.steal_pct
        if cv is not None:  # over every timed step of the run: what the rule judged
            metrics[metric("noise", "step_time_cv", PCT)] = cv
        log_metrics(trainer, metrics)
        reason = judge(shares, cv, len(self.train_steps_s), self.rule)
        if self.noisy_reason is None and reason is not None:  # noisy once, noisy for good
            self.noisy_reason = reason
            set_tags(trainer, {names.NOISY_TAG: "true", names.NOISY_REASON_TAG: reason})
            if trainer.is_global_zero:
                log.warning("hpml: timings of this run are noisy: %s", reason)
        elif self.noisy_reason is None:
            set_tags(trainer, {names.NOISY_TAG: "false"})

    def on_fit_end(self, trainer: L.Trainer, *_: Any) -> None:
        self.probe.close()
        self._noise(trainer)

    on_test_end = on_fit_end

    # training
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.val_seconds_in_train_epoch = 0.0
        self._start("train", trainer, pl_module)

    def on_train_batch_start(self, *_: Any) -> None:
        self.timers["train"].begin()
        self._window_edge("train")

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.timers["train"].end(batch_size(batch))
        self._window_edge("train")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.probe.close()
        metrics = self._finish("train", trainer, pl_module)
        metrics[metric("machine", "load_avg_1m", "procs")] = os.getloadavg()[0]
        _log(pl_module, metrics)

    # validation and test: inference speed
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.probe.close()  # validation inside a training epoch ends its timed window
            self._start("val", trainer, pl_module)

    def on_validation_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self.timers["val"].begin()
            self._window_edge("val")

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        if not trainer.sanity_checking:
            self.timers["val"].end(batch_size(batch))
            self._window_edge("val")

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.probe.close()
        metrics = self._finish("val", trainer, pl_module)
        if trainer.state.fn == TrainerFn.FITTING:
            self.val_seconds_in_train_epoch += metrics[metric("val", "epoch_time", S)]
            reset_peak_memory(pl_module.device)  # training steps after it: their own peak
        _log(pl_module, metrics)

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start("test", trainer, pl_module)

    def on_test_batch_start(self, *_: Any) -> None:
        self.timers["test"].begin()
        self._window_edge("test")

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.timers["test"].end(batch_size(batch))
        self._window_edge("test")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.probe.close()
        _log(pl_module, self._finish("test", trainer, pl_module))


def _log(pl_module: L.LightningModule, metrics: dict[str, float]) -> None:
    """Log the epoch's figures. They are the job's already, the same on every DDP rank:
    syncing them by ``max`` keeps them, and tells Lightning they are not one rank's alone."""
    pl_module.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="max")


def _run_pids(trainer: L.Trainer) -> list[int]:
    """This process, and under DDP on one node every rank's process (one collective), so the
    probe counts other ranks as the run's own work; on several nodes only this process (other
    nodes' process ids mean nothing here)."""
    if trainer.world_size == 1 or trainer.num_nodes > 1:
        return [os.getpid()]
    pids = dict.fromkeys(map(str, range(trainer.world_size)), 0.0)
    pids[str(trainer.global_rank)] = float(os.getpid())
    return [int(pid) for pid in across_ranks(trainer, pids, "sum").values()]
