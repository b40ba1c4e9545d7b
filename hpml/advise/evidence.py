"""What advice reads of a run: the bound of its training and that bound's evidence, and the
knobs a proposal would turn, from the run's tags, params and metrics; a config's repeats give
the medians of their figures.

:class:`Evidence` is plain data, so the rules (:mod:`hpml.advise.rules`) are pure functions of
it. What a run's record does not say (whether its data can be held as tensors, the peaks of
other precisions, the sweep's runs a fused array could train together) is found by the caller
and handed in.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hpml.names import (
    DATA_WAIT,
    FLOPS_PER_SAMPLE,
    HOST_ISSUE,
    MODEL_FWD_FLOPS,
    PCT,
    bound_tag,
    metric,
)

if TYPE_CHECKING:
    from mlflow.entities import Run

STAGE = "train"  # the stage advised: its throughput is what a proposal is measured on
CHOICE = "hpml.choice."  # a run's option of a config group (hpml.tracking.tags)
FWD_BWD_FLOPS = metric("model", "fwd_bwd", FLOPS_PER_SAMPLE)
MFU = (metric(STAGE, "mfu_table", PCT), metric(STAGE, "mfu_measured", PCT))  # first found


@dataclass(frozen=True)
class Peak:
    """A compute peak, FLOP/s (2 x MAC), and where it comes from."""

    flops_per_s: float
    source: str


@dataclass(frozen=True)
class Evidence:
    """A run's (or a config's repeats') training bound, its evidence and its knobs.

    Args:
        bound: ``hpml.bound.train`` (:data:`hpml.names.BOUNDS`).
        data_wait_pct: ``train/data_wait_pct``: the share of a step spent waiting for data.
        host_issue_pct: ``train/host_issue_pct`` (GPU only): the host's time to issue a step
            over the device's span of it.
        mfu_pct: ``train/mfu_table_pct``, else ``train/mfu_measured_pct``.
        device: the device type trained on (``cpu``, ``cuda``); ``cpus`` the host's cores,
            ``devices`` the devices a job trains on.
        trainer: the option of the ``trainer`` group; ``precision`` its ``trainer.precision``.
        placement, num_workers, pin_memory: what the data chose (``data.chosen.*``); the
            loader's knobs are 0 and False where there is no loader.
        configured: the ``data.num_workers`` and ``data.pin_memory`` the config set
            (``auto``, a number, a bool).
        held: whether the data can be held as tensors (None: not known); ``not_held`` why not.
        channels_last: ``model.channels_last``; None for a model without the knob.
        fwd_flops, fwd_bwd_flops: the model's FLOPs per sample (2 x MAC).
        peaks: compute peaks of this device by dtype (``fp32``, ``bf16``, ``fp16``), each
            pair from one source.
        fusable: the runs of its sweep, itself included, that differ only in keys a fused
            array keeps shapes in (``conf/fuse/array.yaml``'s ``fusable``).
    """

    bound: str
    why: str = ""
    data_wait_pct: float = 0.0
    host_issue_pct: float | None = None
    mfu_pct: float | None = None
    device: str = "cpu"
    cpus: int = 1
    devices: int = 1
    trainer: str = "default"
    precision: str = "32-true"
    batch_size: int | None = None
    placement: str = "device"
    num_workers: int = 0
    pin_memory: bool = False
    configured: Mapping[str, str] = field(default_factory=dict)
    held: bool | None = None
    not_held: str = ""
    channels_last: bool | None = None
    compile: str = "none"
    activations: str = "keep"
    fwd_flops: float | None = None
    fwd_bwd_flops: float | None = None
    peaks: Mapping[str, Peak] = field(default_factory=dict)
    fusable: int = 1

    @property
    def wait(self) -> float:
        """The data wait as a fraction of a step, below 1."""
        return min(max(self.data_wait_pct / 100, 0.0), 0.999)


def median_metric(runs: list[Run], name: str) -> float | None:
    values = [r.data.metrics[name] for r in runs if name in r.data.metrics]
    return statistics.median(values) if values else None


def _int(text: str | None) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _flag(text: str | None) -> bool | None:
    return {"true": True, "false": False}.get(str(text).lower())


def device_of(run: Run) -> tuple[str, str]:
    """``("cuda", "NVIDIA H200")`` from the tag ``hpml.device`` (``cuda: NVIDIA H200``)."""
    kind, _, name = run.data.tags.get("hpml.device", "cpu: ").partition(": ")
    return kind or "cpu", name


def read(runs: list[Run], **found: object) -> Evidence:
    """The evidence of ``runs`` (one run, or a config's repeats: the medians of their figures,
    the bound most of them had); ``found``: the fields a run's record does not hold
    (``held``, ``not_held``, ``peaks``, ``fusable``)."""
    first = runs[0]
    params, tags = first.data.params, first.data.tags
    bound = Counter(r.data.tags.get(bound_tag(STAGE), "") for r in runs).most_common(1)[0][0]
    why = next((r.data.tags.get(bound_tag(STAGE, "why"), "") for r in runs), "")
    mfu = next((v for name in MFU if (v := median_metric(runs, name)) is not None), None)
    return Evidence(
        bound=bound,
        why=why,
        data_wait_pct=median_metric(runs, metric(STAGE, DATA_WAIT, PCT)) or 0.0,
        host_issue_pct=median_metric(runs, metric(STAGE, HOST_ISSUE, PCT)),
        mfu_pct=mfu,
        device=device_of(first)[0],
        cpus=_int(tags.get("hpml.cpu_count")) or 1,
        devices=_int(params.get("trainer.devices")) or 1,
        trainer=tags.get(f"{CHOICE}trainer", "default"),
        precision=params.get("trainer.precision", "32-true"),
        batch_size=_int(params.get("data.batch_size")),
        placement=params.get("data.chosen.placement", "device"),
        num_workers=_int(params.get("data.chosen.num_workers")) or 0,
        pin_memory=bool(_flag(params.get("data.chosen.pin_memory"))),
        configured={
            key: params[f"data.{key}"]
            for key in ("num_workers", "pin_memory")
            if f"data.{key}" in params
        },
        channels_last=_flag(params.get("model.channels_last")),
        compile=tags.get(f"{CHOICE}compile", "none"),
        activations=tags.get(f"{CHOICE}activations", "keep"),
        fwd_flops=median_metric(runs, MODEL_FWD_FLOPS),
        fwd_bwd_flops=median_metric(runs, FWD_BWD_FLOPS),
        **found,  # type: ignore[arg-type]
    )
