"""Damaged files hpml reads (a tracking store, a checkpoint to resume from): each is one line
naming the file and what it should be, before training."""

from __future__ import annotations

import io
import sqlite3
import zipfile
from pathlib import Path

import pytest
import torch

from hpml.tracking import MlflowTracker
from hpml.tracking.resume import LAST_TAG, ResumeError, resume_point
from hpml.tracking.store import StoreError, experiment_id, prepare_store
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


def checkpoint_bytes() -> bytes:
    """A checkpoint as Lightning writes one: ``torch.save`` of a dict of state."""
    buffer = io.BytesIO()
    torch.save({"epoch": 1, "state_dict": {"w": torch.ones(64, 64)}}, buffer)
    return buffer.getvalue()


def zip_of_other_files() -> bytes:
    """A zip archive, but not one torch.save wrote."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "not a checkpoint")
    return buffer.getvalue()


CHECKPOINT_DAMAGE = {  # what the file holds, what the line says of it
    "text": (lambda: b"not a checkpoint\n", "not a zip archive as torch.save writes"),
    "truncated": (lambda: checkpoint_bytes()[:2000], "not a zip archive as torch.save writes"),
    "other_zip": (zip_of_other_files, "torch cannot load it (RuntimeError: "),
    "intact": (checkpoint_bytes, None),
}


@pytest.mark.parametrize("damage", list(CHECKPOINT_DAMAGE))
def test_resuming_from_a_damaged_checkpoint_is_one_line_naming_it(
    damage: str, root: Path, client
) -> None:
    content, why = CHECKPOINT_DAMAGE[damage]
    run_id = client.create_run(experiment_id(client, "hpml", str(root / "art"))).info.run_id
    checkpoint = root / "outputs" / "run" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(content())
    client.set_tag(run_id, LAST_TAG, str(checkpoint))
    client.set_terminated(run_id, "KILLED")
    tracker = MlflowTracker(tracking_uri=client.tracking_uri)
    if why is None:
        assert resume_point(tracker, run_id, root / "resumed") == (run_id, str(checkpoint))
        return
    with pytest.raises(ResumeError) as caught:
        resume_point(tracker, run_id, root / "resumed")
    assert "\n" not in str(caught.value)
    assert_names(
        str(caught.value),
        [
            f"resume={run_id}: its last checkpoint {checkpoint} cannot be read: ",
            why,
            "it should be the last.ckpt Lightning saved",
        ],
    )
