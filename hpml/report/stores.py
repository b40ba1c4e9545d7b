"""The MLflow stores a report reads (``--tracking-uri``, once or more), as one: a run is found
in whichever store holds it and marked with it (:data:`~hpml.names.STORE_TAG`,
never logged), for the report to show and to read its history and artifacts back from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hpml.errors import HpmlError
from hpml.names import STORE_TAG, SWEEP_PARENT_TAG
from hpml.report.runs import experiment_ids, sweep_children
from hpml.store_file import damaged_store, sqlite_path

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

SWEEP_PARENT = "tags.`hpml.sweep_parent` = 'true'"


class Stores:
    """One or more MLflow stores; :meth:`of` is the client of the store a run came from."""

    def __init__(self, clients: Sequence[MlflowClient]) -> None:
        self.clients = list(clients)

    @classmethod
    def open(cls, uris: Sequence[str]) -> Stores:
        """The stores at ``uris``; a SQLite file that is not there, or not a database, is one
        line: a report reads stores, it never makes an empty one."""
        from mlflow import MlflowClient

        for uri in uris:
            path = sqlite_path(uri)
            if path is not None and not path.exists():
                raise HpmlError(
                    f"no MLflow store at {path}: run `python -m hpml.train` first, or name a "
                    "store with --tracking-uri"
                )
            if path is not None and (problem := damaged_store(path)) is not None:
                raise HpmlError(f"{uri} is not a readable MLflow store: {problem}")
        return cls([MlflowClient(uri) for uri in dict.fromkeys(uris)])

    @property
    def where(self) -> str:
        """``sqlite:///a.db`` or ``sqlite:///a.db and sqlite:///b.db``: for messages."""
        return " and ".join(str(c.tracking_uri) for c in self.clients)

    def of(self, run: Run) -> MlflowClient:
        """The client of the store ``run`` was read from (the first store, unmarked)."""
        uri = run.data.tags.get(STORE_TAG)
        return next((c for c in self.clients if c.tracking_uri == uri), self.clients[0])

    @staticmethod
    def mark(client: MlflowClient, runs: list[Run]) -> list[Run]:
        for run in runs:
            run.data.tags[STORE_TAG] = str(client.tracking_uri)
        return runs

    def search(
        self, filter_string: str, experiment: str | None = None, **options: Any
    ) -> list[Run]:
        """Runs ``filter_string`` selects in every store, store by store, in ``experiment`` where
        named: an error only where every store lacks it (``options``: ``search_runs``'s)."""
        found = []
        for client in self.clients:
            try:
                ids = experiment_ids(client, experiment)
            except HpmlError:  # only a named experiment can be missing
                if not any(c.get_experiment_by_name(experiment) for c in self.clients):
                    raise
                continue
            runs = client.search_runs(ids, filter_string, **options) if ids else []
            found += self.mark(client, runs)
        return found

    def run(self, run_id: str) -> Run:
        """Run ``run_id`` from whichever store holds it."""
        from mlflow.exceptions import MlflowException

        for client in self.clients:
            with contextlib.suppress(MlflowException):
                return self.mark(client, [client.get_run(run_id)])[0]
        raise HpmlError(f"unknown run id '{run_id}' in {self.where}")

    def sweep(self, sweep: str, experiment: str | None = None) -> Run:
        """A sweep's parent run: ``"last"``, the newest in any store, or by its run id."""
        if sweep != "last":
            parent = self.run(sweep)
            if parent.data.tags.get(SWEEP_PARENT_TAG) != "true":
                raise HpmlError(
                    f"run {sweep} is not a sweep's parent run (use --runs for single runs)"
                )
            return parent
        latest = ["attributes.start_time DESC"]  # the newest of each store
        newest = self.search(SWEEP_PARENT, experiment, order_by=latest, max_results=1)
        if not newest:
            where = f" in experiment '{experiment}'" if experiment else ""
            raise HpmlError(
                f"no sweep in {self.where}{where}: run one with `python -m hpml.train -m ...` "
                "first, or report single runs with --runs RUN_ID ..."
            )
        return max(newest, key=lambda run: run.info.start_time or 0)

    def select(
        self, sweep: str | None, run_ids: Sequence[str] | None, experiment: str | None = None
    ) -> tuple[list[Run], Run | None]:
        """Runs named by ``--runs`` ids, else the jobs of ``--sweep`` (``"last"`` or a parent run
        id; None: the last, in ``experiment`` where named), with the sweep's parent."""
        if run_ids:
            return [self.run(run_id) for run_id in run_ids], None
        parent = self.sweep(sweep or "last", experiment)
        return self.jobs(parent), parent

    def jobs(self, parent: Run) -> list[Run]:
        """The jobs of sweep ``parent``, in job order, from its store."""
        client = self.of(parent)
        return self.mark(client, sweep_children(client, parent))

    def runs_or_jobs(self, run_ids: Sequence[str]) -> list[Run]:
        """The runs ``run_ids`` name, a sweep's parent run standing for the sweep's jobs."""
        found = []
        for run_id in run_ids:
            run = self.run(run_id)
            found += self.jobs(run) if run.data.tags.get(SWEEP_PARENT_TAG) == "true" else [run]
        return found

    def texts(self, run: Run, paths: Sequence[str]) -> dict[str, str | None]:
        """The text of each artifact ``paths`` names of ``run``, None where it has none."""
        import tempfile
        from pathlib import Path

        client = self.of(run)
        listed: dict[str, set[str]] = {}
        found: dict[str, str | None] = dict.fromkeys(paths)
        for path in paths:
            folder, _, name = path.rpartition("/")
            if folder not in listed:
                items = client.list_artifacts(run.info.run_id, folder)
                listed[folder] = {Path(a.path).name for a in items}
            if name not in listed[folder]:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                local = client.download_artifacts(run.info.run_id, path, tmp)
                found[path] = Path(local).read_text()
        return found
