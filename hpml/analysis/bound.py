"""What bounds a stage of a run, from what every run measures: its input, its host, or its device.

- ``input``: the loop waits for its data at least ``input_pct`` of a step
  (``<stage>/data_wait_pct``: the host's time between one step's end and the next one's start,
  the batch's copy to the device and the loop's own work between steps included);
- ``host``: on a GPU, with the data wait under that, the host takes at least ``host_pct`` of the
  device's span of a step to issue it (``<stage>/host_issue_pct``, from the probe steps of
  :class:`~hpml.analysis.timing.StepTimer`): the device waits for launches, Python and
  synchronisation;
- ``device``: neither: the device's own work bounds the step; ``memory`` or ``compute`` where the
  run has a roofline (``callbacks=analysis``), by the model's arithmetic intensity against the
  ridge of the device's roofs.

Thresholds and where they come from: docs/metrics.md#what-bounds-a-run.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpml.names import COMPUTE, DEVICE, HOST, INPUT, MEMORY
from hpml.ranges import Percent


@dataclass(frozen=True)
class Thresholds:
    """Where a stage turns ``input`` (``input_pct`` of a step waiting for data) or ``host``
    (``host_pct`` of the device's span of a step spent issuing it)."""

    input_pct: Percent = 5.0
    host_pct: Percent = 90.0


@dataclass(frozen=True)
class Bound:
    """What bounds ``stage``: ``kind`` (one of :data:`hpml.names.BOUNDS`), ``why`` in words,
    and for ``memory``/``compute`` the ``source`` that split the device bound."""

    stage: str
    kind: str
    why: str
    source: str | None = None

    def line(self) -> str:
        return f"{self.stage} bound by {self.kind}: {self.why}"


def classify(
    stage: str,
    data_wait_pct: float,
    host_issue_pct: float | None = None,
    roofline: tuple[float, float] | None = None,
    thresholds: Thresholds = Thresholds(),
    loader: str = "",
) -> Bound:
    """The bound of ``stage`` from its evidence.

    Args:
        host_issue_pct: the host's issue time over the device's span of a step (GPU only; None
            where there is no such figure: a CPU, or steps that synchronise).
        roofline: the model's arithmetic intensity and the ridge of its roofs, FLOP/byte.
        loader: what feeds the data (``data.placement=loader, data.num_workers=0``), named
            where the stage waits for it.
    """
    waits = f"{data_wait_pct:.0f}% of a step waits for data"
    if data_wait_pct >= thresholds.input_pct:
        return Bound(stage, INPUT, waits + (f" ({loader})" if loader else ""))
    issue = (
        f"the host takes {host_issue_pct:.0f}% of the device's time on a step to issue it"
        if host_issue_pct is not None
        else ""
    )
    if host_issue_pct is not None and host_issue_pct >= thresholds.host_pct:
        return Bound(stage, HOST, f"{issue}; {waits}")
    why = f"{waits}; {issue}" if issue else waits
    if roofline is None:
        return Bound(stage, DEVICE, why)
    intensity, ridge = roofline
    kind = MEMORY if intensity < ridge else COMPUTE
    side = "under" if kind == MEMORY else "at or over"
    why += f"; {intensity:.3g} FLOP/byte, {side} the roofline's ridge of {ridge:.3g}"
    return Bound(stage, kind, why, source="roofline")
