"""The ``hpml_fused`` launcher: :class:`hpml.fused.launch.FusedLauncher` wired to hpml.train.

:mod:`hpml.fused` sits below the lifecycle it launches, so this shim, above both, says how a
job is checked and how an array trains.
"""

from __future__ import annotations

from omegaconf import DictConfig

from hpml.build import Member, Parts
from hpml.fused import launch
from hpml.hydra_job import HydraJob


class FusedLauncher(launch.FusedLauncher):
    def parts(self, cfg: DictConfig, job: HydraJob) -> Parts:
        from hpml.train import job_parts

        return job_parts(cfg, job)

    def train(self, members: list[Member]) -> list[float | None]:
        from hpml.train import array_task

        return array_task(members)
