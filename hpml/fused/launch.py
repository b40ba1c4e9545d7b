"""A Hydra launcher that trains a sweep's same-shaped jobs as fused arrays (``fuse=array``).

Each array runs inside the first member's ``run_job``; every other member gets its own folder,
Hydra's record of its config and a ``JobReturn`` with its own metric, so sweepers and callbacks
see every job as if it had run alone. Jobs that do not fuse run as under the basic launcher.
``parts`` and ``train`` are hpml.train's, wired in by the Hydra plugin
(``hydra_plugins/hpml_fused_launcher``): this package sits below the lifecycle it launches.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobStatus,
    _save_config,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from hpml.build import Member, Parts, build, planned_model
from hpml.hydra_job import HydraJob

log = logging.getLogger(__name__)


class FusedLauncher(Launcher):
    """Hydra's basic launcher, with the jobs :func:`~hpml.fused.plan.plan` fuses trained as
    arrays. A subclass says how a job is checked and how an array trains (the plugin's shim)."""

    def parts(self, cfg: DictConfig, job: HydraJob) -> Parts:
        """The parts of job ``cfg``, built once and checked; raises when it is refused."""
        raise NotImplementedError

    def train(self, members: list[Member]) -> list[float | None]:
        """Each member's optimised metric once ``members`` trained as one array."""
        raise NotImplementedError

    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self.said: set[str] = set()  # the reasons printed: a sweeper's batches repeat them
        self.members: dict[int, Member] = {}  # job num -> the job, its parts built

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from hpml.fused.plan import plan

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        configs = []
        for offset, overrides in enumerate(job_overrides):
            config = self.hydra_context.config_loader.load_sweep_config(
                self.config, list(overrides)
            )
            with open_dict(config):
                config.hydra.job.id = config.hydra.job.num = initial_job_idx + offset
            configs.append(config)
        decided = plan(
            configs,
            on_cpu(configs[0]),
            lambda: capacity([c for c in configs if c.hydra.job.num in self.members]),
            lambda index: self._admitted(configs[index]),
        )
        said = decided.reason and decided.reason.split(";")[0]  # its gist, not the job count
        if said and said not in self.said:  # once per sweep, not per batch of a sweeper
            self.said.add(said)
            print(f"hpml: {decided.reason}", flush=True)
        if len(decided.arrays) > 1:
            sizes = ", ".join(str(len(group)) for group in decided.arrays)
            print(
                f"hpml: fuse=array: {len(configs)} jobs in {len(decided.arrays)} arrays "
                f"({sizes} members): the memory guard or fuse.max_members caps an array"
            )
        returns: dict[int, JobReturn] = {}
        for group in decided.arrays:
            returns |= self._array([configs[i] for i in group], group)
        for index in decided.serial:
            log.info(
                f"\t#{configs[index].hydra.job.num} : "
                f"{' '.join(filter_overrides(job_overrides[index]))}"
            )
            returns[index] = self._run(configs[index], self.task_function)
        return [returns[index] for index in range(len(configs))]

    def _run(self, config: DictConfig, task: Any) -> JobReturn:
        assert self.hydra_context is not None and self.config is not None
        result = run_job(
            hydra_context=self.hydra_context,
            task_function=task,
            config=config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return result

    def _admitted(self, config: DictConfig) -> bool:
        """Whether the job may join an array: its parts build and pass validation (a refused
        job runs alone and fails there with its own line)."""
        try:
            task, job = task_config(placed(config)), HydraJob.of(config.hydra)
            parts = self.parts(task, job)
        except Exception:  # HpmlError, or a bug: either way that job says so, run alone
            return False
        self.members[config.hydra.job.num] = Member(task, job, parts)
        return True

    def _array(self, configs: list[DictConfig], indices: list[int]) -> dict[int, JobReturn]:
        """Train ``configs`` as one array, run as the first member's job; a JobReturn for
        each, keyed by its job index, the others' metrics coming back through ``values``."""
        assert self.hydra_context is not None and self.task_function is not None
        members = [self.members.pop(config.hydra.job.num) for config in configs]
        nums = ", ".join(str(config.hydra.job.num) for config in configs)
        log.info(f"\tfused array of jobs #{nums}")
        callbacks = self.hydra_context.callbacks
        for config in configs[1:]:
            callbacks.on_job_start(config=config, task_function=self.task_function)
        values: list[float | None] = []

        def task(_: DictConfig) -> float | None:
            values.extend(self.train(members))
            return values[0]

        leader = self._run(configs[0], task)
        returns = {indices[0]: leader}
        for position in range(1, len(configs)):
            index, config = indices[position], configs[position]
            result = copy.copy(leader)
            result.cfg = members[position].cfg
            result.hydra_cfg = OmegaConf.create({"hydra": config.hydra})
            result.overrides = list(config.hydra.overrides.task)
            if leader.status == JobStatus.COMPLETED:
                result.return_value = values[position]
            returns[index] = result
            callbacks.on_job_end(config=config, job_return=result)
        return returns


def placed(config: DictConfig) -> DictConfig:
    """``config`` with its job folder set and Hydra's record of it written, as run_job does for
    the job it runs: the members run_job does not run get theirs here."""
    HydraConfig.instance().set_config(config)
    output_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = str(output_dir.resolve())
    HydraConfig.instance().set_config(config)
    output_dir.mkdir(parents=True, exist_ok=True)
    if config.hydra.output_subdir is not None:
        record = output_dir / str(config.hydra.output_subdir)
        _save_config(task_config(config), "config.yaml", record)
        _save_config(OmegaConf.create({"hydra": config.hydra}), "hydra.yaml", record)
        _save_config(config.hydra.overrides.task, "overrides.yaml", record)
    return config


def task_config(config: DictConfig) -> DictConfig:
    """The job's config without Hydra's node, its ``${hydra:...}`` values resolved now, while
    HydraConfig holds this job (the array later runs with the first member's)."""
    HydraConfig.instance().set_config(config)
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    OmegaConf.resolve(task)
    return task


def on_cpu(config: DictConfig) -> bool:
    """Whether the jobs would train on the CPU (no accelerator asked for or found)."""
    accelerator = str(config.trainer.get("accelerator", "auto"))
    if accelerator == "cpu":
        return True
    import torch

    return not torch.cuda.is_available()


def member_model(cfg: DictConfig) -> tuple[Any, int]:
    """Job ``cfg``'s model, built on the CPU as the builder plans it (from the data's planned
    spec, so no data file is read), and its batch size, for the memory guard's probe."""
    datamodule = build("data", cfg.data)
    return planned_model(cfg, datamodule.planned_spec(), "cpu"), datamodule.batch_size


def capacity(configs: list[DictConfig]) -> int | None:
    """Members per array: ``fuse.max_members``, else as many as the memory guard fits. None:
    no cap, for a job whose model cannot be built (the array's build then reports it)."""
    fuse = configs[0].fuse
    if fuse.get("max_members"):
        return int(fuse.max_members)
    import torch

    from hpml.errors import one_line
    from hpml.optimize.fuse.memory import array_capacity, free_bytes, member_footprint

    try:
        model, batch_size = member_model(configs[0])
        footprint = member_footprint(model, batch_size)
        device = torch.device("cpu" if on_cpu(configs[0]) else "cuda")
        free = free_bytes(device)
        size = array_capacity(footprint.total, free, float(fuse.memory_fraction))
    except Exception as exc:  # the array's own build fails alike and is reported as the job's
        print(f"hpml: fuse=array: memory guard skipped: {one_line(exc)}", flush=True)
        return None
    if size < len(configs):
        print(
            f"hpml: fuse=array: memory guard: one member trains in {footprint.total / 2**20:.1f} "
            f"MiB (batch {batch_size}); {fuse.memory_fraction} of {free / 2**30:.1f} GiB free "
            f"on {device.type} fits {size}",
            flush=True,
        )
    return size
