"""Bad inputs through the real command line, and the checks made before Hydra starts.

The subprocess cases (marked slow: ~10 s of imports each) are a representative subset of the
in-process ones, run as a user runs them: exit status, the one error line (and one per data file
the refused run would not find), no traceback on the terminal, and no run left RUNNING in the
store.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.bad_inputs.harness import assert_names, error_line, error_lines, run_statuses
from tests.bad_inputs.test_bad_files import damage_mnist, readonly_dir  # noqa: F401 (fixture)
from tests.bad_inputs.test_bad_overrides import CASES, SMALL
from tests.conftest import run_module

# Pre-Hydra checks (hpml.cli.check_args, exit 2): overrides that cannot make a config at all.
ARG_CASES = {
    "unknown_model": (["model=resnet9000"], ["unknown model 'resnet9000'", "vgg11"]),
    "unknown_optimizer": (["model/optimizer=adamw"], ["'adamw' for model/optimizer=", "adam"]),
    "key_typo": (["data.batch_sise=3"], ["data.batch_sise", "+data.batch_sise=3"]),
    "trainer_key_typo": (["trainer.max_epoch=3"], ["trainer.max_epoch", "trainer.max_epochs?"]),
    # options of hpml's conf/ and those Hydra's plugins register, in one list
    "unknown_launcher": (
        ["-m", "hydra/launcher=slrum"],
        ["'slrum' for hydra/launcher=", "joblib", "slurm", "submitit_local"],
    ),
    "sweep_without_m": (["data.batch_size=32,64"], ["data.batch_size=32,64", "add -m"]),
}


@pytest.mark.parametrize(("args", "expected"), list(ARG_CASES.values()), ids=list(ARG_CASES))
def test_overrides_that_make_no_config_exit_2(
    args: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from hpml.cli import check_args, trainer_overrides

    with pytest.raises(SystemExit) as exit_info:
        check_args(trainer_overrides(args))
    assert exit_info.value.code == 2
    assert_names(error_line(capsys.readouterr().err), expected)


def hpml_cli(args: list[str], cwd: Path, hpml_root: Path) -> subprocess.CompletedProcess:
    """``python -m hpml.train ARGS`` with HPML_ROOT=``hpml_root``, as a user runs it."""
    return run_module("hpml.train", args, hpml_root, cwd=cwd)


SUBPROCESS = [
    "seed_not_int",
    "prune_exclude_int",
    "max_epochs_negative",
    "devices_more_than_machine",
    "static_int8_resnet_add",
    "cifar_layout_on_224",
    "imagenet_layout_on_32",
    "lr_inf",
]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUBPROCESS)
def test_refused_override_from_the_command_line(case: str, root: Path) -> None:
    overrides, expected = CASES[case]
    result = hpml_cli([*SMALL, *overrides], root, root)
    assert result.returncode == 1, result.stderr[-3000:]
    first, *more = error_lines(result.stderr)
    assert_names(first, expected)
    assert all(" not found at " in line for line in more), more  # the data files, if any
    assert run_statuses(root) == []


@pytest.mark.slow
def test_truncated_mnist_from_the_command_line_ends_its_run_failed(root: Path) -> None:
    overrides = damage_mnist(root / "files", "truncated")
    result = hpml_cli([*SMALL, *overrides, "logger.log_system_metrics=false"], root, root)
    assert result.returncode == 1, result.stderr[-3000:]
    assert_names(error_line(result.stderr), ["train-images-idx3-ubyte", "truncated"])
    assert run_statuses(root) == ["FAILED"]


@pytest.mark.slow
def test_read_only_store_from_the_command_line(root: Path, readonly_dir: Path) -> None:  # noqa: F811
    uri = f"sqlite:///{readonly_dir}/mlflow.db"
    result = hpml_cli([*SMALL, f"logger.tracking_uri={uri}"], root, root)
    assert result.returncode == 1, result.stderr[-3000:]
    assert_names(error_line(result.stderr), [uri, "is read-only", "HPML_ROOT"])
    assert run_statuses(root) == []


@pytest.mark.slow
def test_read_only_project_root_from_the_command_line(root: Path, readonly_dir: Path) -> None:  # noqa: F811
    result = hpml_cli(["model=vae"], root, readonly_dir / "project")
    assert result.returncode == 2, result.stderr[-3000:]
    assert_names(error_line(result.stderr), ["HPML_ROOT=", "is read-only"])
