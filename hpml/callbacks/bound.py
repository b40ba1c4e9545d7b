"""What bounds each stage of a run (:mod:`hpml.analysis.bound`): tagged and said in one line.

Reads what the speed monitor logged for the stage (its data wait, the host's issue share) and
the roofline callback's model point where the run has one, once the stage has ended: train and
val at the end of fit, test at the end of test.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import lightning as L

from hpml.analysis.bound import Bound, Thresholds, classify
from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import set_tags
from hpml.callbacks.roofline import RooflineCallback
from hpml.names import DATA_WAIT, HOST_ISSUE, PCT, bound_tag, metric
from hpml.ranges import Percent

log = logging.getLogger(__name__)


class BoundMonitor(HpmlCallback):
    """Tags ``hpml.bound.<stage>`` (``input``, ``host``, ``device``, ``memory``, ``compute``),
    its reason as ``hpml.bound.<stage>.why`` and, where the roofline split the device bound,
    ``hpml.bound.<stage>.source``; prints ``hpml: train bound by input: ...`` as each stage ends.

    Args:
        input_pct: a stage waiting at least this share of a step for its data is ``input``.
        host_pct: on a GPU, a stage whose host takes at least this share of the device's time
            on a step to issue it is ``host``.
    """

    in_array: ClassVar[InArray] = InArray.ONCE  # an array's members share their steps

    def __init__(self, input_pct: Percent = 5.0, host_pct: Percent = 90.0) -> None:
        self.thresholds = Thresholds(input_pct, host_pct)

    def bounds(self, trainer: L.Trainer, stages: tuple[str, ...]) -> list[Bound]:
        """The bound of each of ``stages`` the speed monitor timed."""
        found = trainer.callback_metrics
        roofline = next(
            (c.model_point for c in trainer.callbacks if isinstance(c, RooflineCallback)), None
        )
        choice = getattr(trainer.datamodule, "loading", None)
        loading = choice() if callable(choice) else None
        loader = ""
        if loading is not None:
            knobs = {"placement": loading.placement}
            if loading.placement == "loader":
                knobs["num_workers"] = loading.num_workers
            loader = ", ".join(f"data.{key}={value}" for key, value in knobs.items())
        bounds = []
        for stage in stages:
            wait = found.get(metric(stage, DATA_WAIT, PCT))
            if wait is None:
                continue
            logged = found.get(metric(stage, HOST_ISSUE, PCT))
            issue = None if logged is None else float(logged)
            bounds.append(classify(stage, float(wait), issue, roofline, self.thresholds, loader))
        return bounds

    def _say(self, trainer: L.Trainer, stages: tuple[str, ...]) -> None:
        bounds = self.bounds(trainer, stages)
        tags = {}
        for bound in bounds:
            tags[bound_tag(bound.stage)] = bound.kind
            tags[bound_tag(bound.stage, "why")] = bound.why
            if bound.source is not None:
                tags[bound_tag(bound.stage, "source")] = bound.source
        set_tags(trainer, tags)
        if bounds and trainer.is_global_zero:
            log.info("hpml: %s", "; ".join(bound.line() for bound in bounds))

    def on_fit_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._say(trainer, ("train", "val"))

    def on_test_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._say(trainer, ("test",))
