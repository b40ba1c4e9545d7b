"""What Hydra knows of the job being run, as plain values handed down from ``hpml.train``.

``hpml.train`` reads Hydra's global ``HydraConfig`` and passes a :class:`HydraJob` to tracking
and validation, so what they record and refuse depends only on their arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra.types import RunMode
from omegaconf import DictConfig


@dataclass(frozen=True)
class SweepPlace:
    """Where a job of a multirun sits in its sweep."""

    dir: str  # hydra.sweep.dir: the parent run's record lies here
    num: int  # hydra.job.num
    override_dirname: str  # the job's own overrides, as Hydra names its folder


@dataclass(frozen=True)
class HydraJob:
    """The Hydra runtime facts a job's MLflow run and refusals are made of."""

    output_dir: Path  # hydra.runtime.output_dir
    config_dir: Path | None  # Hydra's own record of the job; None with hydra.output_subdir=null
    name: str  # hydra.job.name: the job log is <output_dir>/<name>.log
    overrides: tuple[str, ...]  # hydra.overrides.task: the job's own command line
    choices: dict[str, str | None]  # hydra.runtime.choices: the option of each config group
    sweep: SweepPlace | None  # None outside a multirun
    # hydra.runtime.config_sources' folders (conf/, --config-dir, hydra.searchpath), in the order
    # Hydra looks for an option in them; empty: conf/ alone
    config_dirs: tuple[Path, ...] = ()

    @classmethod
    def of(cls, hydra: DictConfig) -> HydraJob:
        """The facts in ``hydra``, the node ``HydraConfig.get()`` returns (``cfg.hydra``)."""
        output_dir = Path(hydra.runtime.output_dir)
        sweep = None
        if hydra.mode == RunMode.MULTIRUN:  # job.num is unset outside a multirun
            sweep = SweepPlace(str(hydra.sweep.dir), hydra.job.num, hydra.job.override_dirname)
        return cls(
            output_dir=output_dir,
            config_dir=None if hydra.output_subdir is None else output_dir / hydra.output_subdir,
            name=hydra.job.name,
            overrides=tuple(hydra.overrides.task),
            choices=dict(hydra.runtime.choices),
            sweep=sweep,
            config_dirs=tuple(
                Path(source.path)
                for source in hydra.runtime.config_sources
                if source.schema == "file"
            ),
        )
