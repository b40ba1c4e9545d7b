"""What a fused array's job adds to a serial job's lifecycle (:func:`hpml.lifecycle.run_members`):
the array's parts wrapped around its members', its callbacks, each member's run tags, metrics
and job log. Each member is built exactly as its serial job would be (seeded, then its data,
then its model), gets its own child run of the sweep and its own metrics; the array trains with
the first member's trainer config.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hpml.build import Parts, build
from hpml.errors import one_line
from hpml.hydra_job import HydraJob
from hpml.names import MEMBER_PREFIX, member_prefix

log = logging.getLogger(__name__)

# tags of a fused array member's run, read back by hpml.report.fused
FUSED_TAG = "hpml.fused"
ARRAY_SIZE_TAG = "hpml.fused.array_size"
MEMBER_TAG = "hpml.fused.member"
ARRAY_TAG = "hpml.fused.array"  # the first member's job folder: the members of one array share it
DIVERGED_TAG = "hpml.fused.diverged_at_step"  # the step a member's loss stopped being finite


def wrapped(configs: Sequence[DictConfig], members: Sequence[Parts]) -> Parts:
    """The array's parts: its data module and model around its members' (built, data
    prepared), and its callbacks (:func:`array_callbacks`); the trainer is the job's."""
    from hpml.fused.array import FusedArray
    from hpml.fused.data import FusedData

    data = [OmegaConf.to_container(cfg.data, resolve=True) for cfg in configs]
    shared = all(config == data[0] for config in data)
    callbacks = array_callbacks(configs[0], len(configs))
    return Parts(
        datamodule=FusedData([parts.datamodule for parts in members], shared),
        model=FusedArray([parts.model for parts in members], shared),
        callbacks=callbacks,
    )


def array_callbacks(cfg: DictConfig, size: int) -> list[Any]:
    """The callbacks job ``cfg`` sets, on an array of ``size`` members, as each one's class says
    (its ``in_array``, :mod:`hpml.callbacks.in_array`): built from its config with the class's
    ``array_knobs`` over it, then once (ONCE) or as its ``for_members(size)`` (PER_MEMBER);
    NOT_IN_ARRAYS ones left out. The planner runs a job with any other one serially."""
    from hpml.callbacks.in_array import InArray, array_knobs
    from hpml.errors import IncompatibleError
    from hpml.fused.plan import callback_entries

    callbacks: list[Any] = []
    for entry in callback_entries(cfg):
        if entry.how is InArray.NOT_IN_ARRAYS:
            continue
        if entry.how not in (InArray.ONCE, InArray.PER_MEMBER):
            raise IncompatibleError(
                f"{entry.label}: {entry.path} cannot run in a fused array (in_array: {entry.how})"
            )
        callback = build(entry.group, entry.node, **array_knobs(entry.target))
        callbacks += callback.for_members(size) if entry.how is InArray.PER_MEMBER else [callback]
    return callbacks


def member_tags(index: int, size: int, leader: HydraJob) -> dict[str, str]:
    """The tags that mark member ``index``'s run as one of an array of ``size``, trained in
    ``leader``'s job (its folder names the array: the members of one array share it)."""
    return {
        FUSED_TAG: "true",
        ARRAY_SIZE_TAG: str(size),
        MEMBER_TAG: str(index),
        ARRAY_TAG: str(leader.output_dir),
    }


def member_parts(parts: Parts, index: int) -> tuple[Any, Any, dict[str, str]]:
    """Member ``index``'s data module and model in the array's ``parts`` (members with equal
    data configs share one data module), and, if its loss stopped being finite, the tag of
    the step it did, for its run once trained."""
    datamodules = parts.datamodule.members
    datamodule = datamodules[index if len(datamodules) > 1 else 0]
    diverged = parts.model.diverged
    tags = {DIVERGED_TAG: str(diverged[index])} if index in diverged else {}
    return datamodule, parts.model.members[index], tags


def member_metrics(metrics: dict[str, Any], index: int) -> dict[str, float]:
    """Member ``index``'s metrics under their serial names, with the array's own ones."""
    prefix = member_prefix(index)
    own = {name[len(prefix) :]: float(v) for name, v in metrics.items() if name.startswith(prefix)}
    shared = {
        name: float(value) for name, value in metrics.items() if not name.startswith(MEMBER_PREFIX)
    }
    return shared | own


def copy_logs(jobs: Sequence[HydraJob]) -> None:
    """The array's job log (the first member's folder) into every other member's folder, so
    each run's ``logs/`` holds the log of the process that trained it. A copy that fails warns:
    the run ends either way."""
    leader = jobs[0]
    for handler in logging.getLogger().handlers:
        handler.flush()
    source = leader.output_dir / f"{leader.name}.log"
    for member in jobs[1:]:
        if member.output_dir == leader.output_dir or not source.is_file():
            continue
        try:
            member.output_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, member.output_dir / f"{member.name}.log")
        except OSError as exc:
            log.warning(
                "could not copy the array's log to %s: %s", member.output_dir, one_line(exc)
            )
