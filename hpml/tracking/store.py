"""Where runs go: a local store made safely under concurrency, experiments placed beside it."""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

from filelock import FileLock
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from hpml.errors import HpmlError, causes
from hpml.store_file import DAMAGED_CODES, DAMAGED_HINT, damaged_store, sqlite_path

log = logging.getLogger(__name__)
T = TypeVar("T")
LOCK_TIMEOUT_S = 300.0  # creating a store's schema takes seconds; minutes means a stuck peer
LOCKED_RETRIES = 8  # ~13 s of backoff on top of SQLite's own 20 s busy timeout per attempt


class StoreError(HpmlError):
    """The tracking store cannot be created or written."""


@functools.cache
def prepare_store(tracking_uri: str) -> None:
    """Create and migrate a local SQLite store once, under an inter-process lock: MLflow creates
    its schema on first use without one, and processes starting on a fresh file at once race
    (``table ... already exists``). MLflow caches the opened store, so later clients skip this.
    A file SQLite or MLflow cannot read is one line naming it."""
    path = sqlite_path(tracking_uri)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the MLflow store at {path}: {exc.strerror}; "
            "set logger.tracking_uri=sqlite:///<writable dir>/mlflow.db "
            "(or HPML_ROOT)"
        ) from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise StoreError(
            f"the MLflow store {path} is not writable; set "
            "logger.tracking_uri=sqlite:///<writable dir>/mlflow.db (or HPML_ROOT)"
        )
    problem = damaged_store(path)
    if problem is None:
        with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
            try:
                retry_locked(lambda: MlflowClient(tracking_uri).search_experiments(max_results=1))
            except Exception as exc:  # SQLite read the schema table, not all that MLflow reads
                damage = sqlite_damage(exc)
                if damage is None:
                    raise
                problem = f"{path} cannot be read as an SQLite database (SQLite: {damage})"
    if problem is not None:
        raise StoreError(
            f"the MLflow store {problem}; it should be an SQLite MLflow store: {DAMAGED_HINT}"
        )


def sqlite_damage(exc: BaseException) -> BaseException | None:
    """SQLite's own error saying a file is no database or a damaged one, however wrapped; None
    for any other error."""
    damaged = (e for e in causes(exc) if getattr(e, "sqlite_errorname", None) in DAMAGED_CODES)
    return next(damaged, None)


def retry_locked(action: Callable[[], T]) -> T:
    """Run ``action``, again with jittered backoff while SQLite says the database is locked
    (its busy timeout does not cover a reader upgrading to a writer)."""
    for attempt in range(LOCKED_RETRIES):
        try:
            return action()
        except Exception as exc:
            if not any("database is locked" in str(e) for e in causes(exc)):
                raise
            delay = min(0.1 * 2**attempt, 5.0) * (0.5 + random.random())
            log.debug("database is locked; retrying in %.2f s", delay)
            time.sleep(delay)
    return action()


def experiment_id(client: MlflowClient, name: str, artifact_root: str | None) -> str:
    """Id of experiment ``name``, created on first use; for a local store its artifacts go to
    ``artifact_root/<name>`` (else MLflow puts them under the current directory)."""
    found = retry_locked(lambda: client.get_experiment_by_name(name))
    if found is not None and found.lifecycle_stage == "deleted":
        raise HpmlError(
            f"experiment '{name}' is deleted in this store: restore it "
            f"(mlflow experiments restore --experiment-id {found.experiment_id}) "
            "or set logger.experiment_name=<another name>"
        )
    if found is not None:
        return found.experiment_id
    location = None
    if artifact_root and urlparse(client.tracking_uri).scheme in ("sqlite", "file", ""):
        location = (Path(artifact_root).resolve() / name).as_uri()
    try:
        return retry_locked(lambda: client.create_experiment(name, artifact_location=location))
    except MlflowException as exc:  # another job or sweep created it between the two calls
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        log.debug("experiment %s was created concurrently: %s", name, exc)
        return found.experiment_id
