"""The ``hpml_fused`` launcher: :class:`hpml.fused.launch.FusedLauncher` wired to hpml.train.

:mod:`hpml.fused` sits below the lifecycle it launches, so this shim, above both, says how a
job is checked and how an array trains.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from hpml.build import Member
from hpml.fused import launch


class FusedLauncher(launch.FusedLauncher):
    def check(self, cfg: DictConfig, job: Any) -> Any:
        from hpml.validate import validate

        return validate(cfg, job)

    def train(self, members: list[Member]) -> list[float | None]:
        from hpml.train import array_task

        return array_task(members)
