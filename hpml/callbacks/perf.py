"""Throughput and step time with their spread, FLOP/s and MFU, data-wait share, epoch times, peak
memory, and whether other load made the timings noisy.

Lightning's ``Throughput`` computes each timed cycle's samples/s, FLOP/s and MFU; hpml adds the
median and IQR over cycles, step-time percentiles, data wait, CPU time, utilisation, two peaks,
the job over DDP ranks and the noise verdict (:mod:`hpml.callbacks.rates` says why).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

from hpml.analysis.flops import FlopCount, count_flops
from hpml.analysis.memory import peak_memory_bytes, peak_rss_bytes
from hpml.analysis.noise import NoiseProbe, NoiseRule, judge
from hpml.analysis.stats import cv_pct
from hpml.analysis.timing import StepTimer, synchronized_now
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_metrics, log_text, set_tags
from hpml.callbacks.ranks import across_ranks
from hpml.callbacks.rates import Rates, cycle_rates
from hpml.names import BYTES, FLOPS_PER_S, FLOPS_PER_SAMPLE, MS, PCT, SAMPLES_PER_S, S, metric
from hpml.tensors import batch_size

log = logging.getLogger(__name__)
PEAKS = ("table", "measured")  # what MFU is against: the datasheet's peak, a measured one


class PerformanceMonitor(L.Callback):
    """Speed, memory, FLOP/s and MFU of training and inference, as Composer's speed monitor does.

    Per training epoch, over the steps after ``warmup_steps``: ``train/throughput_samples_per_s``,
    the median over steps of a step's samples over its cycle (the wait for its batch plus the
    step, so data loading stays counted; each cycle's rate by Lightning's ``Throughput``,
    :mod:`hpml.callbacks.rates`), with ``train/throughput_iqr_samples_per_s``;
    ``train/step_time_{p50,p90,iqr}_ms`` and ``train/step_time_cv_pct`` (the step alone; no
    mean: the median and IQR say it without the pull of a stalled step, p90 keeps the tail);
    ``train/data_wait_pct`` (share of the window spent between steps, fetching data),
    ``train/step_cpu_time_p50_ms`` (process CPU time per step, all threads: on a shared machine
    it moves less than wall time), ``train/utilisation_pct`` (busy over elapsed time in that
    window: process CPU time / (wall x torch threads) on CPU, step spans on CUDA: see
    :meth:`~hpml.analysis.timing.StepTimer.utilisation_pct`),
    ``train/epoch_time_s`` (validation excluded) and ``train/peak_memory_bytes``. For validation
    and test: ``{val,test}/epoch_time_s`` and the inference ``{val,test}/throughput_samples_per_s``
    and its ``_iqr`` after ``inference_warmup_steps``. The GPU is synchronised only at the edges
    of a window.

    With ``count_flops`` the model's FLOPs (2 x MAC) are counted once, on one sample, at fit start:
    ``model/fwd_flops_per_sample`` and ``model/fwd_bwd_flops_per_sample`` (a per-module table as
    ``flops/by_module.csv``). Each throughput then also gives ``<stage>/achieved_flops_per_s``
    (FLOPs per sample x samples/s; forward+backward for training, forward for inference) and MFU,
    the share of a peak: ``<stage>/mfu_table_pct`` against the device's datasheet peak for the
    trainer's precision, when hpml knows the device, and ``<stage>/mfu_measured_pct`` against
    the best of fp32 GEMM and convolution micro-benchmarks of this device, cached per host in
    ``peak_cache_dir`` (under mixed precision the table figure is the one to compare with).
    ``machine/load_avg_1m_procs`` records how busy the machine was: shared machines skew timings.

    Noise (:mod:`hpml.analysis.noise`): one probe, open during every timed window (training,
    validation and test steps after warm-up), gives at fit end and test end
    ``noise/other_cpu_pct`` (CPU time of other processes, percent of wall x CPUs),
    ``noise/steal_pct`` (where the kernel reports steal) and ``noise/step_time_cv_pct``, the CV
    over every timed training step of the run (``train/step_time_cv_pct`` is each epoch's).
    These are the run's figures so far, so the test stage's values (same step) replace fit's.
    By ``noise``'s limits (:class:`~hpml.analysis.noise.NoiseRule`) the run is tagged
    ``hpml.noisy`` ``true`` or ``false``; when true, ``hpml.noisy.reason`` names the figures
    and limits, and one warning says ``hpml: timings of this run are noisy: <reason>``. Once
    noisy, a run stays noisy (a quiet test stage does not clear a noisy fit).

    Under DDP the figures are the job's (:mod:`hpml.callbacks.ranks`): throughput and its IQR
    the sum of the ranks' (they step in lockstep), times and peak memory the largest rank's,
    FLOP/s the job's total, MFU the ranks' mean (each rank's FLOP/s over its own device's peak:
    with like devices, the job's total over the peaks of all devices); with more than one
    device ``<stage>/throughput_per_device_samples_per_s`` and
    ``<stage>/achieved_per_device_flops_per_s`` are the job's figures over the device count.

    On a fused array it runs once: its samples/s are each member's (every member reads every
    batch); it would count the FLOPs of every member at once, so there each member counts its
    own (:class:`~hpml.callbacks.model_stats.MemberStats`) and this one none.
    """

    in_array: ClassVar[InArray] = InArray.ONCE
    array_knobs: ClassVar[dict[str, Any]] = {"count_flops": False}

    def __init__(
        self,
        warmup_steps: int = 3,
        inference_warmup_steps: int = 1,
        count_flops: bool = True,
        measured_peak: bool = True,
        peak_cache_dir: str | Path | None = None,
        noise: Mapping[str, float] | NoiseRule | None = None,
    ) -> None:
        self.warmup_steps = warmup_steps
        self.inference_warmup_steps = inference_warmup_steps
        self.count_flops, self.measured_peak = count_flops, measured_peak
        self.peak_cache_dir = Path(peak_cache_dir) if peak_cache_dir else None
        self.flops: dict[str, float] = {}  # FLOPs per sample by stage: train, val, test
        self.counted_shapes: tuple | None = None  # parameter shapes the FLOPs were counted for
        self.peaks: dict[str, float] | None = None  # FLOP/s by kind: table, measured
        self.timers: dict[str, StepTimer] = {}
        self.epoch_start: dict[str, float] = {}
        self.val_seconds_in_train_epoch = 0.0
        self.rule = noise if isinstance(noise, NoiseRule) else NoiseRule(**(noise or {}))
        self.probe = NoiseProbe()
        self.train_steps_s: list[float] = []  # every timed training step of the run, seconds
        self.noisy_reason: str | None = None

    def _start(self, stage: str, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = pl_module.device
        if self.count_flops and hasattr(pl_module, "example_input"):
            self._count(trainer, pl_module)
        if device.type == "cuda":  # each stage's peak, not the peak since the process began
            torch.cuda.reset_peak_memory_stats(device)
        warmup = self.warmup_steps if stage == "train" else self.inference_warmup_steps
        self.timers[stage] = StepTimer(device, warmup)
        self.epoch_start[stage] = synchronized_now(device)

    def _finish(
        self, stage: str, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> dict[str, float]:
        device = pl_module.device
        metrics = {
            metric(stage, "epoch_time", S): synchronized_now(device) - self.epoch_start[stage]
        }
        stats = self.timers[stage].stats()
        if stats is not None and stage == "train":
            self.train_steps_s += self.timers[stage].step_seconds()
            metrics |= {
                metric(stage, "step_time_p50", MS): stats.step_p50_ms,
                metric(stage, "step_time_p90", MS): stats.step_p90_ms,
                metric(stage, "step_time_iqr", MS): stats.step_iqr_ms,
                metric(stage, "step_time_cv", PCT): stats.step_cv_pct,
                metric(stage, "step_cpu_time_p50", MS): stats.step_cpu_p50_ms,
                metric(stage, "data_wait", PCT): stats.data_wait_pct,
                metric(stage, "utilisation", PCT): stats.utilisation_pct,
            }
        metrics[metric(stage, "peak_memory", BYTES)] = peak_memory_bytes(device)[0]
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
        return metrics | self._flops_metrics(stage, summed, trainer.world_size)

    def _rates(self, stage: str) -> Rates | None:
        """This rank's samples/s, FLOP/s and MFU over the stage's timed cycles, each cycle's by
        Lightning's ``Throughput``, their medians by hpml (:mod:`hpml.callbacks.rates`)."""
        timer = self.timers[stage]
        samples = timer.samples[timer.warmup :]
        return cycle_rates(samples, timer.cycle_seconds(), self.flops.get(stage), self.peaks)

    def _flops_metrics(
        self, stage: str, summed: dict[str, float], devices: int
    ) -> dict[str, float]:
        """FLOP/s of the job (the ranks' summed) and per device, and MFU: the ranks' mean, so
        the job's FLOP/s over ``devices`` peaks."""
        if stage not in self.flops:
            return {}
        achieved = summed["flops"]
        metrics = {metric(stage, "achieved", FLOPS_PER_S): achieved}
        if devices > 1:
            metrics[metric(stage, "achieved_per_device", FLOPS_PER_S)] = achieved / devices
        for kind in self.peaks or {}:
            metrics[metric(stage, f"mfu_{kind}", PCT)] = summed[kind] / devices
        return metrics

    def _count(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """FLOPs per sample on one sample, again whenever the parameter shapes changed since.

        Physical pruning changes them between stages. A quantised or compiled net keeps no
        parameters in the module tree: it keeps the fp32 model's count (MFU's convention).
        """
        shapes = tuple((name, tuple(p.shape)) for name, p in pl_module.named_parameters())
        if shapes == self.counted_shapes or (not shapes and self.flops):
            return
        first = self.counted_shapes is None
        self.counted_shapes = shapes
        example = pl_module.example_input(1)
        both = count_flops(pl_module, example, with_backward=True)
        forward: FlopCount = both.forward
        self.flops = {
            "train": both.per_sample,
            "val": forward.per_sample,
            "test": forward.per_sample,
        }
        log_metrics(
            trainer,
            {
                metric("model", "fwd", FLOPS_PER_SAMPLE): forward.per_sample,
                metric("model", "fwd_bwd", FLOPS_PER_SAMPLE): both.per_sample,
            },
        )
        if first:
            total = forward.by_module.get("", forward.total) or 1
            rows = ["module,fwd_flops_per_sample,fwd_bwd_flops_per_sample,share_of_fwd_pct"]
            rows += [
                f"{name or '(model)'},{flops / forward.batch_size:.0f},"
                f"{both.by_module.get(name, 0) / both.batch_size:.0f},"
                f"{100 * flops / total:.2f}"
                for name, flops in forward.by_module.items()
            ]
            log_text(trainer, "\n".join(rows) + "\n", "flops/by_module.csv")
        if self.peaks is None:
            self.peaks = self._peaks(trainer, pl_module.device)

    def _peaks(self, trainer: L.Trainer, device: torch.device) -> dict[str, float]:
        from hpml.analysis.devices import PRECISIONS, table_peak
        from hpml.analysis.measured_peak import measure_peak

        peaks: dict[str, float] = {}
        table = table_peak(device)
        table_kind, measured_kind = PEAKS
        if table is not None and str(trainer.precision) in PRECISIONS:  # no figure for 64-true
            peaks[table_kind] = table.peak_for_precision(str(trainer.precision))
        if self.measured_peak:
            cache = self.peak_cache_dir or Path(trainer.default_root_dir) / ".hpml" / "peaks"
            peaks[measured_kind] = measure_peak(device, cache).fp32_flops_per_s
        return peaks

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _, source = peak_memory_bytes(pl_module.device)
        set_tags(trainer, {"hpml.peak_memory_source": source})
        if self.probe.windows == 0:  # not yet measuring: the run's processes, for the probe
            self.probe = NoiseProbe(_run_pids(trainer))

    def _window_edge(self, stage: str) -> None:
        """Open the noise probe once the stage's timed window has begun (after warm-up)."""
        if self.timers[stage].window_start is not None:
            self.probe.open()

    def _noise(self, trainer: L.Trainer) -> None:
        """The run's noise figures so far, and its verdict by :func:`~hpml.analysis.noise.judge`:
        tags ``hpml.noisy`` (and ``hpml.noisy.reason``), and one line the first time it is."""
        figures = self.probe.figures()
        cv = cv_pct(self.train_steps_s) if self.train_steps_s else None
        metrics: dict[str, float] = {}
        if figures is not None:
            metrics[metric("noise", "other_cpu", PCT)] = figures.other_cpu_pct
            if figures.steal_pct is not None:
                metrics[metric("noise", "steal", PCT)] = figures.steal_pct
        if cv is not None:  # over every timed step of the run: what the rule judged
            metrics[metric("noise", "step_time_cv", PCT)] = cv
        log_metrics(trainer, metrics)
        reason = judge(figures, cv, len(self.train_steps_s), self.rule)
        if self.noisy_reason is None and reason is not None:  # noisy once, noisy for good
            self.noisy_reason = reason
            set_tags(trainer, {"hpml.noisy": "true", "hpml.noisy.reason": reason})
            if trainer.is_global_zero:
                log.warning("hpml: timings of this run are noisy: %s", reason)
        elif self.noisy_reason is None:
            set_tags(trainer, {"hpml.noisy": "false"})

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.probe.close()
        self._noise(trainer)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.probe.close()
        self._noise(trainer)

    # training
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.val_seconds_in_train_epoch = 0.0
        self._start("train", trainer, pl_module)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.timers["train"].begin()
        self._window_edge("train")

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.timers["train"].end(batch_size(batch))
        self._window_edge("train")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.probe.close()
        metrics = self._finish("train", trainer, pl_module)
        metrics[metric("train", "epoch_time", S)] -= self.val_seconds_in_train_epoch
        metrics[metric("machine", "load_avg_1m", "procs")] = os.getloadavg()[0]
        _log(pl_module, metrics)

    # validation and test: inference speed
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.probe.close()  # validation inside a training epoch ends its timed window
            self._start("val", trainer, pl_module)

    def on_validation_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self.timers["val"].begin()
            self._window_edge("val")

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
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
        _log(pl_module, metrics)

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start("test", trainer, pl_module)

    def on_test_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.timers["test"].begin()
        self._window_edge("test")

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
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
