"""Where runs go: experiments with an explicit artifact location next to a local store."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlparse

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

log = logging.getLogger(__name__)


def is_local(tracking_uri: str) -> bool:
    """True for stores on this machine (SQLite files), whose artifacts must be placed explicitly."""
    return urlparse(tracking_uri).scheme in ("sqlite", "file", "")


def experiment_id(client: MlflowClient, name: str, artifact_root: str | None) -> str:
    """Id of experiment ``name``, created on first use.

    For a local store its artifacts go to ``artifact_root/<name>``: without an explicit location
    MLflow would put them under the current directory. A server picks its own location.
    """
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = None
    if artifact_root and is_local(client.tracking_uri):
        location = (Path(artifact_root).resolve() / name).as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException as exc:  # another job or sweep created it between the two calls
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        log.debug("experiment %s was created concurrently: %s", name, exc)
        return found.experiment_id
