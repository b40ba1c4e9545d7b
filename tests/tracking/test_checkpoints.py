"""Checkpoints in MLflow (size cap, paths as tags), resume lookups and stops, on a real store."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpml.names import BEST_TAG, LAST_TAG, WRITER_TAG
from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.resume import (
    ResumeError,
    find_run,
    merge_overrides,
    requested,
)
from hpml.tracking.stop import StopOnSignals
from hpml.tracking.store import experiment_id


@pytest.fixture
def run_id(root, client) -> str:
    exp = experiment_id(client, "hpml", str(root / "mlartifacts"))
    return client.create_run(exp).info.run_id


def saved(path: Path, size: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return str(path)


def test_checkpoints_over_the_cap_stay_on_disk_with_one_warning(root, client, run_id, caplog):
    logger = AttachedMLFlowLogger(
        tracking_uri=client.tracking_uri, run_id=run_id, checkpoint_max_bytes=100
    )
    callback = SimpleNamespace(
        last_model_path=saved(root / "ck" / "last.ckpt", 50),
        best_model_path=saved(root / "ck" / "best.ckpt", 500),
    )
    with caplog.at_level(logging.WARNING, logger="hpml.tracking.logger"):
        logger.after_save_checkpoint(callback)
        logger.after_save_checkpoint(callback)  # unchanged files: nothing new, no new warning
    logged = [a.path for a in client.list_artifacts(run_id, "checkpoints")]
    assert logged == ["checkpoints/last.ckpt"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "best.ckpt is 500 bytes" in warnings[0], warnings
    assert "logger.checkpoint_max_bytes=100" in warnings[0]
    tags = client.get_run(run_id).data.tags
    assert tags[LAST_TAG] == str(root / "ck" / "last.ckpt")
    assert tags[BEST_TAG] == str(root / "ck" / "best.ckpt")
    assert tags[WRITER_TAG] == f"{socket.gethostname()}:{os.getpid()}"


def test_bad_resume_values_name_the_value_and_what_is_valid(root, client, run_id):
    with pytest.raises(ResumeError, match="resume=nosuchrun: no such run in sqlite:"):
        find_run(client, "hpml", "nosuchrun")
    with pytest.raises(ResumeError, match=r"resume=last: no stopped .* run with a checkpoint"):
        find_run(client, "hpml", "last")
    client.set_terminated(run_id, "KILLED")
    with pytest.raises(ResumeError, match=f"resume={run_id}: the run has no checkpoint"):
        find_run(client, "hpml", run_id)
    client.set_tag(run_id, LAST_TAG, saved(root / "ck" / "last.ckpt", 10))
    assert find_run(client, "hpml", "last").info.run_id == run_id
    client.set_tag(run_id, "hpml.choice.prune", "l1_structured")
    with pytest.raises(ResumeError, match="trains with prune=l1_structured, which changes"):
        find_run(client, "hpml", run_id)
    client.set_tag(run_id, "hpml.choice.prune", "none")
    client.update_run(run_id, "RUNNING")  # killed outright, or still training?
    client.set_tag(run_id, WRITER_TAG, f"{socket.gethostname()}:{os.getpid()}")
    with pytest.raises(ResumeError, match=f"resume={run_id}: the run is still being trained"):
        find_run(client, "hpml", run_id)
    # subprocess: the pid of a process that has ended, which no other way gives
    gone = subprocess.Popen(["true"])
    gone.wait()
    client.set_tag(run_id, WRITER_TAG, f"{socket.gethostname()}:{gone.pid}")
    assert find_run(client, "hpml", run_id).info.run_id == run_id
    client.set_terminated(run_id, "FINISHED")
    with pytest.raises(
        ResumeError,
        match=f"resume={run_id}: the run is FINISHED; resume "
        "continues KILLED, FAILED, RUNNING runs",
    ):
        find_run(client, "hpml", run_id)


def test_the_runs_overrides_come_first_and_the_new_ones_win():
    recorded = [
        "model=vae",
        "trainer.max_epochs=3",
        "+callbacks.slow.seconds=1",
        "resume=old",
        "logger.tracking_uri=http://***@host",
    ]
    given = ["resume=abc", "trainer.max_epochs=5", "+callbacks.slow.seconds=0"]
    assert merge_overrides(recorded, given) == ["model=vae", *given]
    assert (
        merge_overrides(recorded, ["callbacks.slow.seconds=0"])[-1] == "++callbacks.slow.seconds=0"
    )  # the key exists only through the recorded +
    assert requested(given) == "abc"
    assert requested(["resume=null"]) is None


def test_sigterm_outside_lightning_ends_in_one_line_and_exit_143(capsys):
    previous = signal.getsignal(signal.SIGTERM)
    stop = StopOnSignals(None)
    stop.run_id = "abc"
    with pytest.raises(SystemExit) as exc, stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here
    assert exc.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err.splitlines() == [
        "hpml: run abc stopped by SIGTERM (KILLED in MLflow) before its first checkpoint: "
        "nothing to resume, run it again"
    ]
    assert signal.getsignal(signal.SIGTERM) is previous


def test_sigterm_while_the_data_prepares_ends_the_job_in_one_line_and_exit_143(
    composed, root, client, capsys
):
    """A stop during the download (the parts completed before any run opens) is the job's stop,
    as one during training: one line, 128 + the signal, and no run left RUNNING."""
    from hpml.train import train

    previous = signal.getsignal(signal.SIGTERM)
    cfg = composed(
        [
            "data._target_=tests.helpers.SigtermOnPrepare",
            "trainer.max_epochs=1",
            f"logger.tracking_uri={client.tracking_uri}",
        ]
    )
    with pytest.raises(SystemExit) as exc:
        train(cfg)
    assert exc.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err.splitlines()[-1:] == [
        "hpml: stopped by SIGTERM before the MLflow run started"
    ]
    assert signal.getsignal(signal.SIGTERM) is previous
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
