"""Quiet output: no upstream noise and no bar off a terminal, one line per epoch instead."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hpml.console import progress_bar, quiet_upstream
from tests.conftest import cli_env

NOISE = ("LeafSpec", "litlogger", "log_every_n_steps")
TINY = [
    "model=lstm",
    "trainer.max_epochs=2",
    "data.train_samples=64",
    "data.val_samples=32",
    "data.test_samples=32",
    "data.batch_size=32",
    "logger.system_metrics_interval_s=0.5",
]


def test_progress_bar_follows_the_terminal_unless_set() -> None:
    leader, follower = os.openpty()
    with open(follower, "w") as terminal:
        assert progress_bar(None, terminal) is True
        assert progress_bar(False, terminal) is False
    os.close(leader)
    assert progress_bar(None, io.StringIO()) is False
    assert progress_bar(True, io.StringIO()) is True


def test_only_the_named_warnings_are_dropped_and_verbose_undoes_it() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_upstream(verbose=False)
        warnings.warn(
            "`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, stacklevel=1
        )
        warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
        quiet_upstream(verbose=True)
        warnings.warn(
            "`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, stacklevel=1
        )
    assert [str(w.message)[:12] for w in caught] == ["something el", "`isinstance("]


def run_merged(args: list[str], root: Path) -> str:
    """``python -m hpml.train ARGS`` with stdout and stderr in one pipe, in the order written."""
    env = cli_env(root)
    result = subprocess.run(
        [sys.executable, "-m", "hpml.train", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout


@pytest.mark.slow
def test_captured_output_is_quiet_with_epoch_lines_and_verbose_shows_all(root: Path) -> None:
    output = run_merged(["-m", *TINY, "hpml.verbose=false,true"], root)
    assert "\r" not in output  # no progress bar: output is a pipe
    quiet, verbose = output.split("[HYDRA] \t#1 : ", 1)
    for noise in NOISE:
        assert noise not in quiet, noise
    epochs = [line for line in quiet.splitlines() if "epoch_summary" in line]
    assert [line.split("] - ")[1].split("  ")[0] for line in epochs] == [
        "epoch 1/2",
        "epoch 2/2",
        "test",
    ]
    assert all("/loss " in line for line in epochs) and "val/loss" in epochs[0]
    for noise in NOISE:  # the same process: the quiet job's filters are gone
        assert noise in verbose, noise
