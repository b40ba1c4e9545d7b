"""A sweep (``python -m hpml.train -m ...``) run by Hydra in this process, through hpml's own
task, sweeper, launchers and sweep callback: for tests that need a sweep's real path without a
process's start-up."""

from __future__ import annotations

from pathlib import Path

from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn

from tests.conftest import CONF


def multirun(overrides: list[str], sweep_dir: Path) -> list[JobReturn]:
    """Every job's return of the sweep ``overrides`` asks for, its folders under ``sweep_dir``;
    this process's logging is left as it is."""
    from hpml.train import main

    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2("train", create_config_search_path(str(CONF)))
    try:
        batches = hydra.multirun(
            "train",
            main.__wrapped__,
            [
                *overrides,
                f"hydra.sweep.dir={sweep_dir}",
                "hydra.mode=MULTIRUN",  # as -m sets it: each job knows its place in the sweep
                "hydra/job_logging=none",
                "hydra/hydra_logging=none",
            ],
        )
    finally:
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
    return [job for batch in batches for job in batch]
