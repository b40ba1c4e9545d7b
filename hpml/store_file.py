"""An MLflow store's SQLite file: its path in a tracking URI, whether its folder can be written,
and whether SQLite can read it.

A leaf, so that :mod:`hpml.validate` (before training), :mod:`hpml.tracking` (as runs open)
and :mod:`hpml.report` (reading runs back) share one reading of a store's file without any of
them reaching into another's layer. Standard library only.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

DAMAGED_HINT = (
    "move or remove it (a new store is made in its place), or set "
    "logger.tracking_uri=sqlite:///<another file>"
)
# SQLite's own verdicts on a file it cannot read as a database (a busy one is not damaged)
DAMAGED_CODES = ("SQLITE_NOTADB", "SQLITE_CORRUPT")


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for servers and in-memory stores)."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    path = tracking_uri.removeprefix("sqlite:///").split("?")[0]
    return None if path in ("", ":memory:") else Path("/" + path.lstrip("/"))


def cannot_write(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (or where it would be made), else None: found by
    creating and removing one, as ``os.access`` says yes to root on a read-only mount."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        handle, name = tempfile.mkstemp(prefix=".hpml-write-check-", dir=existing)
    except OSError as exc:
        return f"{existing} is read-only ({exc.strerror or exc})"
    os.close(handle)
    os.unlink(name)
    return None


def damaged_store(path: Path) -> str | None:
    """Why SQLite cannot read the existing file ``path`` as a database (a text file, truncated
    bytes), else None: also for no file yet or an empty one, which MLflow makes a store of. Reads
    only SQLite's schema table, as MLflow does first, so a large store costs no more."""
    if path.is_dir():
        return f"{path} is a directory"
    if not path.is_file():
        return None
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=20)) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorname not in DAMAGED_CODES:
            return None  # busy or locked: MLflow waits and retries (hpml.tracking.store)
        return f"{path} cannot be read as an SQLite database (SQLite: {exc})"
    return None
