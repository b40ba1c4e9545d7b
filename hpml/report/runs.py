"""Where runs are: the project root, the default store and peak cache, a sweep's jobs, and the
options that name runs as users do (a sweep, "last" or its parent id, or run ids)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.errors import HpmlError
from hpml.names import JOB_NUM_TAG

if TYPE_CHECKING:  # mlflow takes seconds to import: CLIs answer --help without it
    from mlflow import MlflowClient
    from mlflow.entities import Run


def project_root() -> Path:
    """``paths.root_dir`` as ``hpml.train`` resolves it: HPML_ROOT, else the working directory."""
    return Path(os.environ.get("HPML_ROOT") or Path.cwd()).resolve()


def default_tracking_uri() -> str:
    """The store ``hpml.train`` writes to by default (see conf/logger/mlflow.yaml)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def peak_cache_dir() -> Path:
    """The peak cache a run reads by default (``callbacks.perf.peak_cache_dir``)."""
    return Path(os.environ.get("HPML_PEAK_CACHE") or project_root() / ".hpml" / "peaks")


def experiment_ids(client: MlflowClient, experiment: str | None) -> list[str]:
    if experiment is None:
        return [e.experiment_id for e in client.search_experiments()]
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = ", ".join(e.name for e in client.search_experiments())
        raise HpmlError(f"no experiment '{experiment}' in {client.tracking_uri} (have: {names})")
    return [found.experiment_id]


def sweep_children(client: MlflowClient, parent: Run) -> list[Run]:
    """The jobs of a sweep, in job order."""
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    if not children:
        raise HpmlError(f"sweep {parent.info.run_id} has no runs")
    return sorted(children, key=lambda r: int(r.data.tags.get(JOB_NUM_TAG, 0)))


def add_run_choice(parser: argparse.ArgumentParser) -> None:
    """``--sweep`` or ``--runs``, ``--experiment``, ``--tracking-uri``: for ``Stores.select``."""
    pick = parser.add_mutually_exclusive_group()
    pick.add_argument(
        "--sweep",
        metavar="last|RUN_ID",
        help="a sweep's parent run (its children are read); 'last' = the most recent sweep "
        "(default)",
    )
    pick.add_argument("--runs", nargs="+", metavar="RUN_ID", help="these runs")
    parser.add_argument(
        "--experiment", metavar="NAME", help="look for the last sweep in this experiment only"
    )
    parser.add_argument(
        "--tracking-uri",
        help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///<HPML_ROOT or "
        "cwd>/mlflow.db)",
    )
