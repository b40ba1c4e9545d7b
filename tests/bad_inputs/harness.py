"""How every bad input is judged: the exit, the one error line per problem, and what the store
was left with.

In-process cases call ``hpml.train.main``, the Hydra task the CLI runs, with the job config that
``@hydra.main`` would compose (Hydra's decorator passes a given config straight to the task), so
they take the CLI's code path from the start of the job: validation, MLflow, the one-line report.
What they skip is Hydra's launch and ``hpml.cli.check_args``, which subprocess cases cover.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ERROR = "hpml: error:"


def error_lines(stderr: str) -> list[str]:
    """The ``hpml: error:`` lines of ``stderr``, one per problem and each once; no traceback."""
    lines = [line for line in stderr.splitlines() if line.startswith(ERROR)]
    assert lines, stderr[-3000:]
    assert len(set(lines)) == len(lines), stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    return lines


def error_line(stderr: str) -> str:
    """The single ``hpml: error:`` line of ``stderr``, which must hold no traceback."""
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def assert_names(line: str, expected: Sequence[str]) -> None:
    """``line`` names each of ``expected`` (the bad value, and what would be valid)."""
    missing = [text for text in expected if text not in line]
    assert not missing, f"{missing} not in {line!r}"


def run_statuses(root: Path) -> list[str]:
    """Status of every run in the project's store (``root/mlflow.db``)."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    ids = [e.experiment_id for e in client.search_experiments()]
    return [run.info.status for run in client.search_runs(ids)] if ids else []


def refused_lines(cfg: Any, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run the job as the CLI does; it must exit 1 with a line per problem, which are returned."""
    from hpml.train import main

    with pytest.raises(SystemExit) as exit_info:
        main(cfg)
    assert exit_info.value.code == 1
    return error_lines(capsys.readouterr().err)


def refused_job(cfg: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """Run the job as the CLI does; it must exit 1 with one error line, which is returned."""
    lines = refused_lines(cfg, capsys)
    assert len(lines) == 1, lines
    return lines[0]
