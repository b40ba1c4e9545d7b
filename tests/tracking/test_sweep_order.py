"""The order a sweep runs its jobs in: repeats (``replicate``) interleaved by hpml's sweeper, the
default (``hydra_plugins/hpml_basic_sweeper``), every other order Hydra's basic sweeper's."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from hydra_plugins.hpml_basic_sweeper.sweeper import InterleavedSweeper
from tests.conftest import CONF

SWEEPER = "hydra_plugins.hpml_basic_sweeper.sweeper.InterleavedSweeper"


def jobs(sweeper: type[BasicSweeper], overrides: list[str], size: int | None = None) -> list:
    parsed = OverridesParser.create().parse_overrides(overrides)
    return sweeper.split_arguments(parsed, size)


def test_a_real_sweep_runs_replicate_0_of_every_config_then_replicate_1(tmp_path: Path):
    """``python -m hpml.train -m experiment=<one sweeping lr> replicate=0,1,2``, run by Hydra
    itself in-process (hpml's config, its sweeper and Hydra's basic launcher, in batches of
    four) with a task that records each job's number and values instead of training."""
    overlay = tmp_path / "experiment"
    overlay.mkdir()
    (overlay / "lr_twice.yaml").write_text(
        "# @package _global_\nhydra:\n  sweeper:\n    params:\n"
        "      model.optimizer.lr: 1e-3,2e-3\n"
    )

    def task(cfg: DictConfig) -> tuple[int, float, int]:
        return HydraConfig.get().job.num, cfg.model.optimizer.lr, cfg.replicate

    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2("train", create_config_search_path(str(CONF)))
    try:
        batches = hydra.multirun(
            "train",
            task,
            [
                f"hydra.searchpath=[file://{tmp_path}]",
                "experiment=lr_twice",
                "replicate=0,1,2",
                "hydra.sweeper.max_batch_size=4",
                f"hydra.sweep.dir={tmp_path / 'multirun'}",
                "~hydra.callbacks.mlflow_sweep",  # no MLflow: the order is the subject here
                "hydra/job_logging=none",  # and this process's logging left as it is
                "hydra/hydra_logging=none",
            ],
        )
    finally:
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
    assert [len(batch) for batch in batches] == [4, 2]
    ran = [job.return_value for batch in batches for job in batch]
    assert ran == [
        (0, 1e-3, 0),
        (1, 2e-3, 0),
        (2, 1e-3, 1),
        (3, 2e-3, 1),
        (4, 1e-3, 2),
        (5, 2e-3, 2),
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        ["a=1,2", "b=x,y"],
        ["a=1,2", "replicate=0", "b=x,y"],  # one repeat: nothing to interleave
        ["replicate=range(2)", "a=1,2"],  # replicate already slowest (an experiment's params)
    ],
)
def test_without_repeats_after_another_key_the_order_is_hydras(overrides):
    assert jobs(InterleavedSweeper, overrides) == jobs(BasicSweeper, overrides)


def test_replicates_interleave_keeping_the_configs_order_and_each_jobs_overrides():
    found = jobs(InterleavedSweeper, ["a=1,2", "replicate=range(2)", "b=x,y"], size=3)
    assert found == [
        [
            ["a=1", "replicate=0", "b=x"],
            ["a=1", "replicate=0", "b=y"],
            ["a=2", "replicate=0", "b=x"],
        ],
        [
            ["a=2", "replicate=0", "b=y"],
            ["a=1", "replicate=1", "b=x"],
            ["a=1", "replicate=1", "b=y"],
        ],
        [["a=2", "replicate=1", "b=x"], ["a=2", "replicate=1", "b=y"]],
    ]
    # +replicate=... (a key added) and a repeated value count as repeats all the same
    assert jobs(InterleavedSweeper, ["a=1,2", "+replicate=0,0"]) == [
        [["a=1", "+replicate=0"], ["a=2", "+replicate=0"]] * 2
    ]


@pytest.mark.parametrize(
    ("overrides", "sweeper"),
    [
        ([], SWEEPER),
        (["experiment=vae_pruning"], SWEEPER),
        (["fuse=array"], SWEEPER),
        (["hparams_search=vae_optuna"], "hydra_plugins.hpml_optuna_sweeper.sweeper.OptunaSweeper"),
        (["hydra/sweeper=basic"], "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"),
    ],
)
def test_hpml_sweeps_with_its_sweeper_unless_told_otherwise(overrides, sweeper):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    assert cfg.hydra.sweeper._target_ == sweeper
    if overrides == ["experiment=vae_pruning"]:  # an experiment's sweep stays its own
        assert cfg.hydra.sweeper.params.prune == "l1_structured,l2_structured,fpgm"
