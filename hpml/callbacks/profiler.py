"""``profile=torch``: torch.profiler over a window of training steps, with labelled step regions.

Each step is cut into the regions of :mod:`hpml.callbacks.regions` (NVTX ranges too on CUDA).
Each closed window's trace, key-averages tables and execution summary go to MLflow under
``profiler/window_<n>/``, the summary also as ``profile/<category>_pct`` metrics.
"""

from __future__ import annotations

import csv
import io
import logging
import tempfile
from pathlib import Path
from typing import Annotated, Any

import lightning as L
from torch.profiler import ProfilerActivity, profile, schedule

from hpml.analysis.profile_summary import summarise_events
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.logging import log_file, log_metrics, log_text
from hpml.callbacks.regions import StepRanges, StepRegions
from hpml.names import PCT, metric
from hpml.ranges import Count, Range, Steps

log = logging.getLogger(__name__)

CSV_FIELDS = {  # column -> the key-averages event's attribute
    "name": "key",
    "input_shapes": "input_shapes",
    "count": "count",
    "self_cpu_time_total_us": "self_cpu_time_total",
    "cpu_time_total_us": "cpu_time_total",
    "self_device_time_total_us": "self_device_time_total",
    "device_time_total_us": "device_time_total",
    "self_cpu_memory_usage_bytes": "self_cpu_memory_usage",
    "cpu_memory_usage_bytes": "cpu_memory_usage",
    "self_device_memory_usage_bytes": "self_device_memory_usage",
    "flops": "flops",
}


def _csv(averages: Any) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    writer.writerows([getattr(event, name) for name in CSV_FIELDS.values()] for event in averages)
    return out.getvalue()


class TorchProfilerWindow(StepRanges):
    """Profiles training steps ``skip_first + wait + warmup`` onwards for ``active`` steps,
    ``repeat`` times (0: until training ends), with ``torch.profiler``'s schedule and switches;
    ``nvtx`` adds NVTX ranges on CUDA, ``trace=false`` keeps only the tables and summary."""

    def __init__(
        self,
        skip_first: Steps = 5,
        wait: Steps = 1,
        warmup: Steps = 1,
        active: Count = 3,
        repeat: Annotated[int, Range(ge=0, note="0: until training ends")] = 1,
        record_shapes: bool = True,
        profile_memory: bool = True,
        with_flops: bool = True,
        with_stack: bool = False,
        row_limit: Count = 25,
        nvtx: bool = True,
        trace: bool = True,
    ) -> None:
        self.schedule = schedule(
            skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat
        )
        self.options = {
            "record_shapes": record_shapes,
            "profile_memory": profile_memory,
            "with_flops": with_flops,
            "with_stack": with_stack,
        }
        self.row_limit, self.nvtx, self.trace = row_limit, nvtx, trace
        super().__init__()
        self.profiler: profile | None = None
        self.trainer: L.Trainer | None = None
        self.windows = 0

    def regions_for(self, pl_module: L.LightningModule) -> StepRegions:
        """Regions torch.profiler records, NVTX ranges too on CUDA with ``nvtx``."""
        return StepRegions(record=True, nvtx=self.nvtx and pl_module.device.type == "cuda")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        cuda = pl_module.device.type == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.trainer, self.cuda = trainer, cuda
        self.profiler = profile(
            activities=activities,
            schedule=self.schedule,
            on_trace_ready=self._window_done,
            **self.options,
        )
        self.profiler.start()
        super().on_train_start(trainer, pl_module)

    def stepped(self) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def _stop(self, *_: Any) -> None:
        """Stop the profiler and close its open range (both process-wide), a failed run's too."""
        self.regions.close()
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None

    on_exception = _stop

    def on_train_end(self, *_: Any) -> None:
        self._stop()
        if self.windows == 0:
            log.warning(
                "the profiler window never opened: training had fewer steps than "
                "skip_first + wait + warmup + active"
            )

    def _window_done(self, prof: profile) -> None:
        """Trace, tables and execution summary of the window that just closed, into MLflow."""
        trainer = self.trainer
        assert trainer is not None
        prefix = f"profiler/window_{self.windows}"
        self.windows += 1
        averages = prof.key_averages()
        keys = {"self_cpu_time": "self_cpu_time_total", "memory": "self_cpu_memory_usage"}
        if self.cuda:
            keys |= {
                "self_device_time": "self_device_time_total",
                "device_memory": "self_device_memory_usage",
            }
        for title, key in keys.items():
            log_text(
                trainer,
                averages.table(sort_by=key, row_limit=self.row_limit),
                f"{prefix}/top_by_{title}.txt",
            )
        log_text(trainer, _csv(averages), f"{prefix}/ops.csv")
        if self.options["record_shapes"]:
            by_shape = prof.key_averages(group_by_input_shape=True)
            log_text(
                trainer,
                by_shape.table(sort_by="self_cpu_time_total", row_limit=self.row_limit),
                f"{prefix}/top_by_input_shape.txt",
            )
            log_text(trainer, _csv(by_shape), f"{prefix}/ops_by_input_shape.csv")
        summary = summarise_events(prof.events(), cuda=self.cuda)
        if summary:
            log_metrics(
                trainer, {metric("profile", name, PCT): value for name, value in summary.items()}
            )
            lines = [f"{name:<20} {value:6.2f} %" for name, value in summary.items()]
            log_text(trainer, "\n".join(lines) + "\n", f"{prefix}/execution_summary.txt")
        if self.trace:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "trace.json"
                prof.export_chrome_trace(str(path))
                log_file(trainer, path, prefix)


class ProfilerReport(HpmlCallback):
    """Stores a Lightning profiler's report (``profile=simple|advanced``) as a run artifact."""

    def _store(self, trainer: L.Trainer, stage: str) -> None:
        if trainer.profiler is not None:
            log_text(trainer, trainer.profiler.summary(), f"profiler/lightning_{stage}.txt")

    def on_fit_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._store(trainer, "fit")

    def on_test_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._store(trainer, "test")
