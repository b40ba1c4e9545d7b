"""FLOPs per sample and the peaks MFU is against, for the speed monitor.

Counted on one sample, again only when the parameter shapes change. Peaks: the datasheet's for
the trainer's precision, and the best of GEMM and convolution micro-benchmarks in the dtype that
precision computes in, cached per host and dtype.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from hpml.analysis.flops import FlopCount, count_flops
from hpml.callbacks.logging import log_metrics, log_text, set_tags
from hpml.names import FLOPS_PER_S, FLOPS_PER_SAMPLE, MFU_PEAK_DTYPE_TAG, PCT, metric, mfu_peak

PEAKS = ("table", "measured")  # what MFU is against: the datasheet's peak, a measured one


def per_sample_metrics(forward: FlopCount, both: FlopCount) -> dict[str, float]:
    """The model's FLOPs per sample: of its forward pass, and of forward and backward."""
    return {
        metric("model", "fwd", FLOPS_PER_SAMPLE): forward.per_sample,
        metric("model", "fwd_bwd", FLOPS_PER_SAMPLE): both.per_sample,
    }


class FlopBudget:
    """A run's FLOPs per sample by stage and the peaks (FLOP/s) it is measured against."""

    def __init__(self, measured_peak: bool, peak_cache_dir: Path | None) -> None:
        self.measured_peak, self.peak_cache_dir = measured_peak, peak_cache_dir
        self.per_sample: dict[str, float] = {}  # FLOPs per sample by stage: train, val, test
        self.counted_shapes: tuple | None = None  # parameter shapes the FLOPs were counted for
        self.peaks: dict[str, float] | None = None  # FLOP/s by kind: table, measured
        self.measured_in: str | None = None  # the dtype the measured peak was taken in

    def metrics(self, stage: str, summed: dict[str, float], devices: int) -> dict[str, float]:
        """FLOP/s of the job (the ranks' summed) and per device, and MFU: the ranks' mean, so
        the job's FLOP/s over ``devices`` peaks."""
        if stage not in self.per_sample:
            return {}
        achieved = summed["flops"]
        metrics = {metric(stage, "achieved", FLOPS_PER_S): achieved}
        if devices > 1:
            metrics[metric(stage, "achieved_per_device", FLOPS_PER_S)] = achieved / devices
        for kind in self.peaks or {}:
            metrics[metric(stage, f"mfu_{kind}", PCT)] = summed[kind] / devices
        return metrics

    def count(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """FLOPs per sample on one sample, again whenever the parameter shapes changed since;
        a quantised or compiled net keeps the fp32 count (MFU's convention)."""
        shapes = tuple((name, tuple(p.shape)) for name, p in pl_module.named_parameters())
        if shapes == self.counted_shapes or (not shapes and self.per_sample):
            return
        first = self.counted_shapes is None
        self.counted_shapes = shapes
        example = trainer.precision_plugin.convert_input(pl_module.example_input(1))
        both = count_flops(pl_module, example, with_backward=True)
        forward: FlopCount = both.forward  # the same pass's forward half
        self.per_sample = {
            "train": both.per_sample,
            "val": forward.per_sample,
            "test": forward.per_sample,
        }
        log_metrics(trainer, per_sample_metrics(forward, both))
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
            # the denominators, so that every MFU can be worked out again from the run alone
            log_metrics(trainer, {mfu_peak(kind): v for kind, v in self.peaks.items()})
            if self.measured_in is not None:
                set_tags(trainer, {MFU_PEAK_DTYPE_TAG: self.measured_in})

    def _peaks(self, trainer: L.Trainer, device: torch.device) -> dict[str, float]:
        """The peaks of the trainer's precision: the table's, and one measured in the dtype
        that precision computes in (only that one: a run measures one dtype, not three)."""
        from hpml.analysis.devices import PRECISIONS, precision_dtype, table_peak
        from hpml.analysis.measured_peak import measure_compute

        peaks: dict[str, float] = {}
        precision = str(trainer.precision)
        table = table_peak(device)
        table_kind, measured_kind = PEAKS
        if table is not None and precision in PRECISIONS:  # no figure for 64-true
            peaks[table_kind] = table.peak_for_precision(precision)
        dtype = precision_dtype(precision)
        if self.measured_peak and dtype is not None:
            cache = self.peak_cache_dir or Path(trainer.default_root_dir) / ".hpml" / "peaks"
            measured = measure_compute(device, cache, dtype)
            peaks[measured_kind], self.measured_in = measured.flops_per_s, measured.taken_in
        return peaks
