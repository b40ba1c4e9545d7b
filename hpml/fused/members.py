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
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from hpml.build import Assembled, Member
from hpml.errors import one_line
from hpml.hydra_job import HydraJob
from hpml.names import (
    ARRAY_SIZE_TAG,
    ARRAY_TAG,
    DIVERGED_TAG,
    FUSED_TAG,
    MEMBER_PREFIX,
    MEMBER_TAG,
    member_prefix,
)

if TYPE_CHECKING:
    import lightning as L

    from hpml.data.base import HpmlDataModule
    from hpml.fused.array import FusedArray
    from hpml.fused.data import FusedData
    from hpml.models.base import HpmlModule

log = logging.getLogger(__name__)


def wrapped(
    members: Sequence[Member], models: Sequence[HpmlModule]
) -> tuple[FusedData, FusedArray, list[L.Callback]]:
    """The array's data module and model around its ``members``' (data prepared) and their
    ``models``, and its callbacks (:func:`array_callbacks`, from the first member's)."""
    from hpml.fused.array import FusedArray
    from hpml.fused.data import FusedData

    data = [OmegaConf.to_container(member.cfg.data, resolve=True) for member in members]
    shared = all(config == data[0] for config in data)
    return (
        FusedData([member.parts.datamodule for member in members], shared),
        FusedArray(models, shared),
        array_callbacks(members[0].parts.callbacks, len(members)),
    )


def array_callbacks(callbacks: Sequence[L.Callback], size: int) -> list[L.Callback]:
    """A job's built ``callbacks`` on an array of ``size`` members, as each one's class says
    (its ``in_array``): each one's ``for_members(size)``, NOT_IN_ARRAYS ones left out. The
    planner runs a job with any other one serially."""
    from hpml.callbacks.base import HpmlCallback, declared, qualified
    from hpml.callbacks.in_array import InArray
    from hpml.errors import IncompatibleError

    derived: list[L.Callback] = []
    for callback in callbacks:
        how = declared(type(callback))
        if how is InArray.NOT_IN_ARRAYS:
            continue
        if how not in (InArray.ONCE, InArray.PER_MEMBER):
            raise IncompatibleError(
                f"{qualified(type(callback))} cannot run in a fused array (in_array: {how})"
            )
        assert isinstance(callback, HpmlCallback)
        derived += callback.for_members(size)
    return derived


def member_tags(index: int, size: int, leader: HydraJob) -> dict[str, str]:
    """The tags that mark member ``index``'s run as one of an array of ``size``, trained in
    ``leader``'s job (its folder names the array: the members of one array share it)."""
    return {
        FUSED_TAG: "true",
        ARRAY_SIZE_TAG: str(size),
        MEMBER_TAG: str(index),
        ARRAY_TAG: str(leader.output_dir),
    }


def member_parts(parts: Assembled, index: int) -> tuple[HpmlDataModule, HpmlModule, dict[str, str]]:
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
