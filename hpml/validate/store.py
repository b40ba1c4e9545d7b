"""Where hpml writes (the project root, a local store, its artifacts) can be written, and a
local store that exists can be read as one.

Imports nothing heavy: ``hpml.cli`` uses it before Hydra starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from hpml.errors import ConfigError
from hpml.store_file import DAMAGED_HINT, cannot_write, damaged_store, sqlite_path

STORE_HINT = "set logger.tracking_uri=sqlite:///<writable dir>/mlflow.db, or HPML_ROOT"


def check_store(tracking_uri: str, artifact_root: str | None) -> None:
    """A local SQLite store, and the artifacts beside it, go where files can be written; an
    existing store file is one SQLite can read."""
    path = sqlite_path(str(tracking_uri))
    if path is None:
        return
    problem = cannot_write(path.parent)
    if problem is None and path.is_file() and not os.access(path, os.W_OK):
        problem = f"{path} is read-only"
    if problem is not None:
        raise ConfigError(
            "logger.tracking_uri", tracking_uri, f"a store hpml can write: {problem}; {STORE_HINT}"
        )
    problem = damaged_store(path)
    if problem is not None:
        expected = f"an SQLite MLflow store, but {problem}: {DAMAGED_HINT}"
        raise ConfigError("logger.tracking_uri", tracking_uri, expected)
    if artifact_root and urlparse(str(artifact_root)).scheme in ("", "file"):
        problem = cannot_write(Path(str(artifact_root).removeprefix("file://")))
        if problem is not None:
            raise ConfigError(
                "logger.artifact_root",
                artifact_root,
                f"a directory hpml can write artifacts to: {problem}",
            )


def unwritable_root(overrides: list[str]) -> str | None:
    """A one-line message when the project root (``paths.root_dir``: HPML_ROOT or the current
    directory) cannot be written: Hydra would fail making the job's folder, in a traceback."""
    given = [a.split("=", 1)[1] for a in overrides if a.startswith("paths.root_dir=")]
    if given:
        root, name = given[-1], "paths.root_dir"
    elif os.environ.get("HPML_ROOT"):
        root, name = os.environ["HPML_ROOT"], "HPML_ROOT"
    else:
        root, name = os.getcwd(), "the current directory"
    problem = cannot_write(Path(root))
    if problem is None:
        return None
    where = f"{name}={root}" if name != "the current directory" else f"{name} ({root})"
    return (
        f"{where} cannot be written: {problem}; hpml writes outputs/, mlflow.db and "
        f"mlartifacts/ there: set HPML_ROOT to a writable directory"
    )
