"""The canary at a run's start and end: when the fixed reference workload is timed
(:mod:`hpml.analysis.canary` says how), so the report can tell a run whose machine ran slow."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import lightning as L

from hpml.analysis.canary import Reading, describe, measure, plan
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_metrics, mlflow_loggers
from hpml.names import CANARY_PLAN_TAG, CANARY_POINTS, CANARY_THRESHOLD_TAG
from hpml.ranges import Count, Range, Steps

Size = Annotated[int | None, Range(ge=1, null="not timed")]
Mib = Annotated[float | None, Range(gt=0, null="not timed")]
START, END = CANARY_POINTS


class Canary(HpmlCallback):
    """Times the reference workload as the run's first stage is set up and as its last one is
    torn down, each within ``budget_s``, and logs
    ``canary/<workload>_{start,end}_{ms,flops_per_s,bytes_per_s}``,
    ``canary/<workload>_{start,end}_repeats_count`` and ``canary/threads_{start,end}_count``;
    tags the plan (``hpml.canary.plan``) and the threshold (``hpml.canary.slow_above``) the
    report judges the run by.

    The run's last stage is its test where ``until_test`` (the run's ``test``), else its fit:
    a fit-only run ends at fit's teardown, a test-only one starts and ends around its test.
    Under DDP every rank times it (alike, at the same moment) and rank zero's is logged.

    The start reading is logged once the stage begins, at the step it begins from: a resumed
    run's process times its own machine and logs it at the step its checkpoint restored, never
    again at step 0.
    """

    # in a fused array: once, for the machine every member ran on; each member's run gets it
    in_array: ClassVar[InArray] = InArray.ONCE

    def __init__(
        self,
        gemm_n: Size = 512,
        copy_mib: Mib = 16,
        cuda_gemm_n: Size = 4096,
        h2d_mib: Mib = 16,
        repeats: Count = 3,
        warmup: Steps = 1,
        budget_s: Annotated[float | None, Range(gt=0, null="every repeat")] = 0.06,
        slow_above: Annotated[float, Range(gt=0, note="a fraction: 0.25 = 25% slower")] = 0.25,
        until_test: bool = False,
    ) -> None:
        self.sizes = dict(
            gemm_n=gemm_n, copy_mib=copy_mib, cuda_gemm_n=cuda_gemm_n, h2d_mib=h2d_mib
        )
        self.repeats, self.warmup, self.budget_s = repeats, warmup, budget_s
        self.slow_above, self.until_test = slow_above, until_test
        self.start: Reading | None = None
        self.logged = self.ended = False

    def _measure(self, trainer: L.Trainer) -> Reading:
        workloads = plan(trainer.strategy.root_device, **self.sizes)
        return measure(workloads, self.repeats, self.warmup, self.budget_s)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.start is not None:
            return
        self.start = self._measure(trainer)

    def _log_start(self, trainer: L.Trainer, *_: Any) -> None:
        """The start reading and the tags, at the first hook that runs once the checkpoint, if
        any, has restored the trainer's step."""
        if self.start is None or self.logged:
            return
        self.logged = True
        workloads = [t.workload for t in self.start.timings]
        log_metrics(trainer, self.start.metrics(START))
        tags = {
            CANARY_PLAN_TAG: describe(workloads, self.repeats, self.warmup, self.budget_s),
            CANARY_THRESHOLD_TAG: f"{self.slow_above:g}",
        }
        _set_tags(trainer, tags)

    on_sanity_check_start = on_train_start = on_validation_start = _log_start
    on_test_start = on_predict_start = _log_start

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.start is None or self.ended or (self.until_test and stage != "test"):
            return
        self.ended = True
        self._log_start(trainer)
        log_metrics(trainer, self._measure(trainer).metrics(END))


def _set_tags(trainer: L.Trainer, tags: dict[str, str]) -> None:
    """``tags`` on the run in one write: a write per tag costs the run's start a store
    transaction each, about as long as the canary's own work."""
    from mlflow.entities import RunTag

    for logger in mlflow_loggers(trainer):
        logger.experiment.log_batch(logger.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
