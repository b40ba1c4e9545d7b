"""Find runs in an MLflow store the way users name them: a sweep ("last" or its parent id), ids."""

from __future__ import annotations

import os
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Run

from hpml.errors import HpmlError


def default_tracking_uri() -> str:
    """The store ``hpml.train`` writes to by default (see conf/logger/mlflow.yaml)."""
    if uri := os.environ.get("MLFLOW_TRACKING_URI"):
        return uri
    root = Path(os.environ.get("HPML_ROOT", ".")).resolve()
    return f"sqlite:///{root / 'mlflow.db'}"


def _experiment_ids(client: MlflowClient, experiment: str | None) -> list[str]:
    if experiment is None:
        return [e.experiment_id for e in client.search_experiments()]
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = ", ".join(e.name for e in client.search_experiments())
        raise HpmlError(f"no experiment '{experiment}' in {client.tracking_uri} "
                        f"(experiments: {names})")
    return [found.experiment_id]


def sweep_parent(client: MlflowClient, sweep: str, experiment: str | None = None) -> Run:
    """The parent run of sweep ``sweep``: ``"last"`` for the newest, or the parent's run id."""
    if sweep != "last":
        return run_by_id(client, sweep)
    parents = client.search_runs(_experiment_ids(client, experiment),
                                 "tags.hpml.sweep_parent = 'true'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise HpmlError(f"no sweep in {client.tracking_uri}: run one with "
                        "`python -m hpml.train -m ...` first")
    return parents[0]


def sweep_children(client: MlflowClient, parent: Run) -> list[Run]:
    """The jobs of a sweep, in job order."""
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return sorted(children, key=lambda r: int(r.data.tags.get("hpml.job_num", 0)))


def run_by_id(client: MlflowClient, run_id: str) -> Run:
    try:
        return client.get_run(run_id)
    except Exception as exc:
        raise HpmlError(f"no run '{run_id}' in {client.tracking_uri}") from exc


def select_runs(client: MlflowClient, sweep: str | None, run_ids: list[str] | None,
                experiment: str | None = None) -> tuple[list[Run], Run | None]:
    """Runs named by ``--runs`` ids, or the jobs of ``--sweep``, with the sweep's parent."""
    if run_ids:
        return [run_by_id(client, run_id) for run_id in run_ids], None
    parent = sweep_parent(client, sweep or "last", experiment)
    return sweep_children(client, parent), parent
