"""Override checks that answer in one line before Hydra, Lightning or torch start."""

from __future__ import annotations

import pytest

from hpml.cli import (
    check_args,
    composition_error,
    first_job,
    hoist_flags,
    malformed_override,
    sweep_without_multirun,
    unknown_option,
)
from tests.conftest import options


def test_unknown_group_option_names_the_valid_ones():
    message = unknown_option(["model=vgg12"])
    assert {"lstm", "vae", "vgg11"} <= set(options("model"))
    assert message == f"unknown model 'vgg12' for model= (valid: {', '.join(options('model'))})"


def test_every_value_of_a_sweep_is_checked():
    assert "unknown data 'cifar100'" in unknown_option(["-m", "data=cifar10,cifar100"])
    assert unknown_option(["-m", "data=cifar10,mnist", "model=vgg11"]) is None


def test_nested_groups_and_plain_keys():
    assert "unknown option 'adamw' for model/optimizer=" in unknown_option(
        ["model/optimizer=adamw"]
    )
    assert unknown_option(["model/optimizer=adam", "data.batch_size=3", "+x=1"]) is None


def test_sweep_without_multirun_flag_says_how_to_run_it():
    assert "add -m" in sweep_without_multirun(["data.batch_size=32,64"])
    assert sweep_without_multirun(["-m", "data.batch_size=32,64"]) is None


def test_first_job_takes_the_first_value_of_each_sweep():
    assert first_job(["-m", "model=vgg11,lstm", "+a.b=1,2", "seed=3"]) == [
        "model=vgg11",
        "+a.b=1",
        "seed=3",
    ]


def test_malformed_override_is_one_line_naming_it(capsys):
    """Hydra's grammar refuses it with a traceback; hpml says which override, and why."""
    with pytest.raises(SystemExit) as exit:
        check_args(["seed=1", "model=[a", "-m"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("hpml: error: cannot read the override 'model=[a': no viable")
    assert malformed_override(["-m", "model=vgg11,lstm", "+a.b=[1,2]", "~seed"]) is None


def test_mistyped_key_is_one_line_naming_it():
    message = composition_error(["trainer.max_epoch=3"])
    assert "trainer.max_epoch" in message and "\n" not in message
    assert composition_error(["trainer.max_epochs=3"]) is None


def test_flags_may_come_anywhere_among_overrides():
    assert hoist_flags(["model=lstm", "-m", "data.batch_size=32,64"]) == [
        "-m",
        "model=lstm",
        "data.batch_size=32,64",
    ]
    assert hoist_flags(["--cfg", "job", "a=1"]) == ["--cfg", "job", "a=1"]


def test_every_trainer_argument_is_set_without_a_plus(tmp_path):
    """Lightning's own signature is the independent count; a value not in the YAML reaches
    the Trainer."""
    import inspect

    import hydra
    import lightning as L

    from hpml.cli import trainer_arguments, trainer_overrides
    from hpml.train import compose_job

    assert set(trainer_arguments()) == set(inspect.signature(L.Trainer).parameters)
    args = trainer_overrides(["trainer.max_steps=3", "trainer.max_epochs=2", "model=lstm"])
    assert args == ["++trainer.max_steps=3", "trainer.max_epochs=2", "model=lstm"]
    trainer = hydra.utils.instantiate(compose_job(args, tmp_path).trainer, logger=False)
    assert (trainer.max_steps, trainer.max_epochs) == (3, 2)
