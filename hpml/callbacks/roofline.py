"""A roofline of the model on the run's device, once per run, as metrics, a CSV and a plot."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import lightning as L

from hpml.analysis.devices import FP64, KNOWN_DEVICES, PRECISIONS, DevicePeak
from hpml.analysis.flops import count_flops
from hpml.analysis.measured_peak import is_measured, measure_peak, raise_roof, resolve_peak
from hpml.analysis.roofline import RooflineAnalysis, analyse, classify
from hpml.analysis.roofline_plot import above_roof, describe_peak, plot_roofline, points_csv
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.logging import (
    log_file,
    log_metrics,
    log_text,
    mlflow_loggers,
    resuming,
    set_tags,
)
from hpml.errors import ConfigError
from hpml.models.base import HpmlModule
from hpml.names import (
    BYTES_PER_SAMPLE,
    FORWARD_ACHIEVED,
    FWD_BWD_FLOPS_PER_SAMPLE,
    FWD_FLOPS_PER_SAMPLE,
    INTENSITY,
    PEAK_BANDWIDTH,
    PEAK_FP32,
    PEAK_SOURCE_TAG,
    PEAK_TAG,
    RIDGE,
    STAGE,
)
from hpml.ranges import Positive, Range, Steps

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class RooflineCallback(HpmlCallback):
    """Arithmetic intensity and achieved FLOP/s of every layer and of the model, at fit start.

    Once, inside the trainer's precision context, so autocast's dtypes are measured. The roof is
    ``device``'s datasheet (None: the run's GPU) or a peak measured and cached under ``cache_dir``.
    Metrics, artifacts and conventions: docs/profiling.md.
    """

    def __init__(
        self,
        device: str | None = None,
        cache_dir: str | Path = ".hpml/peaks",
        timing_passes: Steps = 3,
        batch_size: Annotated[int | None, Range(ge=1, null="the data's batch size")] = None,
        peak_seconds: Positive = 1.0,
    ) -> None:
        if device is not None and device != "measured" and device not in KNOWN_DEVICES:
            raise ConfigError(
                "device", device, f"one of {', '.join(KNOWN_DEVICES)}, measured or null"
            )
        self.device = device
        self.cache_dir = Path(cache_dir)
        self.timing_passes = timing_passes
        self.batch_size = batch_size
        self.peak_seconds = peak_seconds
        self.model_point: tuple[float, float] | None = None  # intensity, ridge: FLOP/byte
        self.done = False

    def _example(self, trainer: L.Trainer, pl_module: L.LightningModule) -> Any:
        batch_size = self.batch_size or getattr(trainer.datamodule, "batch_size", None) or 1
        if isinstance(pl_module, HpmlModule):
            return pl_module.example_input(batch_size)
        example = pl_module.example_input_array
        if example is None:
            return None
        return trainer.strategy.batch_to_device(example)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.done or not trainer.is_global_zero or resuming(trainer):
            return
        self.done = True
        example = self._example(trainer, pl_module)
        if example is None:
            log.warning(
                "roofline: skipped: the model has neither example_input() nor example_input_array"
            )
            return
        example = trainer.precision_plugin.convert_input(example)  # as batches are: 64/16-true
        precision = str(trainer.precision)
        if precision not in PRECISIONS:  # 64-true, transformer-engine: no table figure
            log.warning(
                "roofline: no peak for precision %s: drawn against the fp32 roof", precision
            )
            precision = "64-true" if precision in FP64 else "32-true"
        with trainer.precision_plugin.forward_context():
            fwd_bwd = count_flops(pl_module, example, with_backward=True)
            analysis = analyse(pl_module, example, self.timing_passes, fwd_bwd.forward)
        peak = resolve_peak(self.device, pl_module.device, self.cache_dir, self.peak_seconds)
        peak = self._bounding(peak, analysis, pl_module.device, precision)
        metrics = {
            INTENSITY: analysis.model.intensity,
            BYTES_PER_SAMPLE: analysis.bytes_per_sample,
            FWD_FLOPS_PER_SAMPLE: analysis.flops_per_sample,
            FWD_BWD_FLOPS_PER_SAMPLE: fwd_bwd.per_sample,
            PEAK_FP32: peak.fp32_flops_per_s,
            PEAK_BANDWIDTH: peak.memory_bytes_per_s,
            RIDGE: peak.ridge_for_precision(precision),
        }
        if analysis.model.flops_per_s is not None:
            metrics[FORWARD_ACHIEVED] = analysis.model.flops_per_s
        log_metrics(trainer, metrics)
        self.model_point = (analysis.model.intensity, metrics[RIDGE])
        self._report(trainer, analysis, peak, precision)

    def _bounding(
        self, peak: DevicePeak, analysis: RooflineAnalysis, device: torch.device, precision: str
    ) -> DevicePeak:
        """A measured roof that a timed point beats is measured again, then raised to the best
        point (labelled); a datasheet roof is kept."""
        points = [*analysis.layers, analysis.model]
        above = above_roof(points, peak, precision)
        if not above:
            return peak
        if not is_measured(peak):
            log.warning(
                "roofline: above the datasheet roof: %s",
                "; ".join(f"{p.label}: {why}" for p, why in above),
            )
            return peak
        log.warning(
            "roofline: %d point(s) above the measured roof (%s), e.g. %s at %.3g FLOP/s: "
            "measuring the roof again",
            len(above),
            describe_peak(peak, precision),
            above[0][0].label,
            above[0][0].flops_per_s,
        )
        again = measure_peak(device, self.cache_dir, self.peak_seconds, refresh=True)
        peak = max(peak, again, key=lambda p: p.fp32_flops_per_s)
        above = above_roof(points, peak, precision)
        if above:
            peak = raise_roof(peak, points, precision)
            log.warning(
                "roofline: still above the measured roof: %s; roof raised to the best point: %s",
                "; ".join(f"{p.label}: {why}" for p, why in above),
                describe_peak(peak, precision),
            )
        return peak

    def _report(
        self, trainer: L.Trainer, analysis: RooflineAnalysis, peak: DevicePeak, precision: str
    ) -> None:
        """Log which layers are bound by what, and store the table and the plot in MLflow."""
        points = [*analysis.layers, analysis.model]
        counted = [p for p in analysis.layers if p.flops > 0]
        for bound in ("memory-bound", "compute-bound"):
            names = [p.label for p in counted if classify(p, peak, precision) == bound]
            log.info("roofline: %s layers: %s", bound, ", ".join(names) or "none")
        moving = sorted({p.kind for p in analysis.layers if p.flops == 0})
        if moving:
            log.info(
                "roofline: memory-bound, no counted FLOPs (data movement only): %d layers (%s)",
                len(analysis.layers) - len(counted),
                ", ".join(moving),
            )
        log.info(
            "roofline: model %.3g FLOP/byte, %s on %s",
            analysis.model.intensity,
            classify(analysis.model, peak, precision),
            describe_peak(peak, precision),
        )
        log_text(trainer, points_csv(points, peak, precision), "roofline/layers.csv")
        if not mlflow_loggers(trainer):  # nowhere to keep the plot: do not draw it
            return
        set_tags(trainer, {PEAK_TAG: peak.name, PEAK_SOURCE_TAG: peak.source[:5000]})
        with tempfile.TemporaryDirectory() as tmp:
            module = trainer.lightning_module
            net = module.net if isinstance(module, HpmlModule) else module
            title = f"{type(net).__name__}, batch {analysis.batch_size}, forward, on {peak.name}"
            for path in plot_roofline(points, peak, Path(tmp) / "roofline", precision, title):
                log_file(trainer, path, STAGE)
