"""A strategy that spawns or forks its processes inside ``fit`` is refused at any device count,
one device included, where it would train and lose the measurements its process made."""

from __future__ import annotations

import pytest
from lightning.pytorch.strategies import StrategyRegistry
from omegaconf import OmegaConf

from hpml.errors import ConfigError
from hpml.validate.machine import FOREIGN_LAUNCHES, check_trainer
from tests.bad_inputs.harness import assert_names, refused_job, run_statuses

SPAWNING = [
    name
    for name in StrategyRegistry.available_strategies()
    if any(word in name for word in FOREIGN_LAUNCHES)
]


def test_lightning_has_the_spawning_strategies_the_refusal_names() -> None:
    assert {"ddp_spawn", "ddp_fork", "ddp_notebook"} <= set(SPAWNING)


@pytest.mark.parametrize("strategy", SPAWNING)
def test_a_spawning_strategy_is_refused_on_one_device(strategy: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_trainer(OmegaConf.create({"accelerator": "cpu", "devices": 1, "strategy": strategy}))
    line = str(caught.value)
    assert line.startswith(f"trainer.strategy={strategy!r} is invalid: expected ddp"), line
    assert "\n" not in line


@pytest.mark.parametrize("strategy", ["auto", "ddp", "ddp_find_unused_parameters_true"])
def test_strategies_that_run_the_command_again_pass_on_one_device(strategy: str) -> None:
    trainer = OmegaConf.create({"accelerator": "cpu", "devices": 1, "strategy": strategy})
    assert check_trainer(trainer) == 1


def test_ddp_spawn_on_one_device_is_refused_before_any_run(
    composed, root, capsys: pytest.CaptureFixture[str]
) -> None:
    small = ["trainer.max_epochs=1", "data.limit=64", "trainer.enable_progress_bar=false"]
    line = refused_job(composed([*small, "+trainer.strategy=ddp_spawn"]), capsys)
    assert_names(line, ["trainer.strategy='ddp_spawn'", "ddp", "at any device count"])
    assert run_statuses(root) == []
