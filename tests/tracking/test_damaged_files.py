"""Damaged files hpml reads (a tracking store): each is one line naming the file and what it
should be, before training."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hpml.tracking.store import StoreError, prepare_store
from tests.bad_inputs.harness import assert_names, refused_job

STORE_WANTED = ["should be an SQLite MLflow store", "move or remove it", "logger.tracking_uri="]
QUIET = [
    "model=vae",
    "data.limit=64",
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "logger.log_system_metrics=false",
]


def test_a_store_that_is_a_text_file_is_refused_in_one_line_naming_it(
    root: Path, composed, capsys: pytest.CaptureFixture[str]
) -> None:
    store = root / "mlflow.db"
    store.write_text("runs: see the spreadsheet\n")
    line = refused_job(composed(QUIET), capsys)
    assert_names(line, [str(store), "file is not a database", "an SQLite MLflow store, but"])
    assert_names(line, ["move or remove it", "logger.tracking_uri="])
    assert store.read_text() == "runs: see the spreadsheet\n"  # left as it was


def damaged_experiments_table(store: Path) -> None:
    """Overwrite the root page of the store's ``experiments`` table: SQLite still opens the file
    and reads its schema, MLflow cannot read its experiments."""
    with sqlite3.connect(store) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        (page,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name='experiments'"
        ).fetchone()
    db.close()
    with store.open("r+b") as handle:
        handle.seek((page - 1) * page_size)
        handle.write(b"\xff" * page_size)


@pytest.mark.parametrize("damage", ["truncated", "experiments_page"])
def test_a_damaged_store_is_one_line_naming_it(
    damage: str, store_template: Path, tmp_path: Path
) -> None:
    """Where a sweep's parent run or ``resume=`` opens the store, before any job."""
    store = tmp_path / "mlflow.db"
    data = store_template.read_bytes()
    if damage == "truncated":
        store.write_bytes(data[: len(data) // 3])
    else:
        store.write_bytes(data)
        damaged_experiments_table(store)
    with pytest.raises(StoreError) as caught:
        prepare_store(f"sqlite:///{store}")
    assert "\n" not in str(caught.value)
    assert_names(
        str(caught.value), [f"the MLflow store {store} cannot be read", "SQLite: database disk"]
    )
    assert_names(str(caught.value), STORE_WANTED)
