"""The arms of a try compose, through Hydra, to the original config with each proposal's change
and nothing else."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from hpml.advise.arms import GROUP, ORIGINAL, Arm, arm_name, overlay, split, sweep_args, write
from hpml.build import CONF_DIR

ORIGINAL_ARGS = [
    "model=resnet18",
    "data.num_workers=0",
    "data.batch_size=4",
    "activations=keep",
    "trainer.max_epochs=1",
    "++trainer.limit_val_batches=1",
    "logger.experiment_name=elsewhere",
    "replicate=1",
]
CHANGES = [("data.num_workers=1",), ("activations=checkpoint",), ("trainer=bf16",)]


def arms() -> list[Arm]:
    return [Arm(arm_name(change), change) for change in CHANGES]


def composed(shared: list[str], config_dir: Path, arm: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            "train",
            overrides=[*shared, f"hydra.searchpath=[file://{config_dir}]", f"+{GROUP}={arm}"],
        )


def test_the_original_overrides_of_a_key_an_arm_sets_leave_the_command_line() -> None:
    shared, moved = split(ORIGINAL_ARGS, arms())
    assert moved == ["data.num_workers=0", "activations=keep"]
    assert shared == [
        "model=resnet18",
        "data.batch_size=4",
        "trainer.max_epochs=1",
        "++trainer.limit_val_batches=1",
    ]  # the try sets the store, the experiment and the repeats itself
    assert arm_name(("compile=torch_compile", "compile.mode=reduce-overhead")) == (
        "compile_torch_compile_compile_mode_reduce_overhead"
    )
    assert overlay(["trainer=bf16", "data.num_workers=1"]) == (
        "# @package _global_\ndefaults:\n- override /trainer: bf16\n- _self_\n"
        "data:\n  num_workers: 1\n"
    )


def test_each_arm_is_the_original_with_its_change(tmp_path: Path) -> None:
    shared, moved = split(ORIGINAL_ARGS, arms())
    config_dir = write(tmp_path / "conf", moved, arms())
    names = sorted(p.stem for p in (config_dir / GROUP).glob("*.yaml"))
    assert names == sorted([ORIGINAL, *(arm.name for arm in arms())])
    seen = {}
    for name in names:
        cfg = composed(shared, config_dir, name)
        seen[name] = (
            cfg.data.num_workers,
            (cfg.activations or {}).get("method"),
            cfg.trainer.precision,
        )
        assert cfg.model.net._target_ == "torchvision.models.resnet18"
        assert cfg.data.batch_size == 4 and cfg.trainer.max_epochs == 1
        assert cfg.trainer.limit_val_batches == 1  # a key under a group an arm changes
    assert seen == {
        ORIGINAL: (0, None, "32-true"),
        "data_num_workers_1": (1, None, "32-true"),
        "activations_checkpoint": (0, "checkpoint", "32-true"),
        "trainer_bf16": (0, None, "bf16-mixed"),
    }


def test_the_sweep_passes_hpml_trains_own_checks(tmp_path: Path) -> None:
    from hpml.cli import check_args

    shared, moved = split(ORIGINAL_ARGS, arms())
    config_dir = write(tmp_path / "conf", moved, arms())
    store = (f"sqlite:///{tmp_path / 'mlflow.db'}", "my experiment")
    args = sweep_args(shared, config_dir, arms(), 3, store, tmp_path / "sweep")
    assert args[-2:] == [
        f"+{GROUP}=original,data_num_workers_1,activations_checkpoint,trainer_bf16",
        "replicate=0,1,2",
    ]
    assert "logger.experiment_name='my experiment'" in args
    check_args(args)  # exits 2, saying why, where a job's config would not compose
