"""How a fused array's job differs from a serial job's in :func:`hpml.lifecycle.run_members`
(:class:`Array`, in the shape of :class:`hpml.lifecycle.Job`): the array's parts wrapped around
its members', its callbacks, each member's run tags, metrics and job log. Each member is built
exactly as its serial job would be (seeded, then its data, then its model), gets its own child
run of the sweep and its own metrics; the array trains with the first member's trainer config.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from hpml.build import Assembled, Member, build_model, build_trainer
from hpml.errors import one_line
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
    from hpml.models.base import HpmlModule

log = logging.getLogger(__name__)
Tags = dict[str, str]


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


def member_metrics(metrics: dict[str, Any], index: int) -> dict[str, float]:
    """Member ``index``'s metrics under their serial names, with the array's own ones."""
    prefix = member_prefix(index)
    own = {name[len(prefix) :]: float(v) for name, v in metrics.items() if name.startswith(prefix)}
    shared = {
        name: float(value) for name, value in metrics.items() if not name.startswith(MEMBER_PREFIX)
    }
    return shared | own


class Array:
    """A job of several ``members`` trained as one fused array. Its members' runs reopen their
    earlier attempt's (``restarted(folder)``: the run to reopen, None: a fresh one) and start
    afresh, as an array keeps no checkpoint."""

    def __init__(self, members: Sequence[Member], restarted: Callable[[Path], str | None]) -> None:
        self.members, self.restarted = members, restarted
        self.leader = members[0].job  # its folder names the array: the members share it

    def folder(self, member: Member) -> Path:
        return member.job.output_dir

    def assemble(self) -> Assembled:
        """Each member's model built as its serial job's, then the array's data module and
        model around the members' and their callbacks (:func:`array_callbacks`), and a trainer
        with the first member's config."""
        from hpml.fused.array import FusedArray
        from hpml.fused.data import FusedData

        models = [build_model(m.cfg, m.parts.datamodule) for m in self.members]
        data = [OmegaConf.to_container(m.cfg.data, resolve=True) for m in self.members]
        shared = all(config == data[0] for config in data)
        datamodule = FusedData([m.parts.datamodule for m in self.members], shared)
        model = FusedArray(models, shared)
        callbacks = array_callbacks(self.members[0].parts.callbacks, len(self.members))
        return Assembled(datamodule, model, build_trainer(self.members[0].cfg, callbacks, True))

    def start_points(self) -> tuple[list[str | None], str | None]:
        return [self.restarted(self.folder(m)) for m in self.members], None

    def tags(self, index: int) -> dict[str, str]:
        """The tags that mark member ``index``'s run as one of the array, trained in the first
        member's job."""
        return {
            FUSED_TAG: "true",
            ARRAY_SIZE_TAG: str(len(self.members)),
            MEMBER_TAG: str(index),
            ARRAY_TAG: str(self.leader.output_dir),
        }

    def outcome(self, parts: Assembled, index: int) -> tuple[HpmlDataModule, HpmlModule, Tags]:
        """Member ``index``'s data module and model in the array's ``parts`` (members with equal
        data configs share one data module), and, if its loss stopped being finite, the tag of
        the step it did, for its run once trained."""
        datamodules = parts.datamodule.members
        datamodule = datamodules[index if len(datamodules) > 1 else 0]
        diverged = parts.model.diverged
        tags = {DIVERGED_TAG: str(diverged[index])} if index in diverged else {}
        return datamodule, parts.model.members[index], tags

    def select(self, index: int) -> Callable[[dict[str, Any]], dict[str, float]]:
        return partial(member_metrics, index=index)

    @contextlib.contextmanager
    def training(self, run_ids: str) -> Iterator[None]:
        """Says the array's runs; then, trained or not, copies the array's job log (the first
        member's folder) into every other member's folder, so each run's ``logs/`` holds the
        log of the process that trained it. A copy that fails warns: the run ends either way."""
        log.info("fused array of %d members: runs %s", len(self.members), run_ids)
        try:
            yield
        finally:
            for handler in logging.getLogger().handlers:
                handler.flush()
            source = self.leader.output_dir / f"{self.leader.name}.log"
            for job in [member.job for member in self.members[1:]]:
                if job.output_dir == self.leader.output_dir or not source.is_file():
                    continue
                try:
                    job.output_dir.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, job.output_dir / f"{job.name}.log")
                except OSError as exc:
                    log.warning(
                        "could not copy the array's log to %s: %s", job.output_dir, one_line(exc)
                    )

    def results(self, metrics: dict[str, float], parts: Assembled) -> list[dict[str, float]]:
        """Each member's metrics under their serial names; NaN as the optimised metric of a
        member whose loss stopped being finite, as its serial job's."""
        results = [member_metrics(metrics, index) for index in range(len(self.members))]
        name = self.members[0].cfg.optimized_metric
        for index in parts.model.diverged if name else ():
            results[index][name] = math.nan
        return results
