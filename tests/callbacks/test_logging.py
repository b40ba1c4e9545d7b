"""callbacks/logging.py, the one door from callbacks to the run: rank zero writes, others do not."""

from __future__ import annotations

import lightning as L
import pytest
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.strategies import DDPStrategy

from hpml.callbacks.logging import log_file, log_metrics, log_text, mlflow_loggers, set_tags
from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.store import experiment_id


@pytest.fixture
def run_id(root, client) -> str:
    exp = experiment_id(client, "hpml", str(root / "mlartifacts"))
    return client.create_run(exp).info.run_id


@pytest.fixture(autouse=True)
def process_rank_restored():
    """Setting an environment's global rank also sets Lightning's process-wide
    ``rank_zero_only.rank``: left at 1, every later test in this process would log nothing."""
    rank = rank_zero_only.rank
    yield
    rank_zero_only.rank = rank


def trainer_at_rank(rank: int, logger: AttachedMLFlowLogger) -> L.Trainer:
    """A trainer that believes it is process ``rank`` of a two-process DDP job (not launched).

    The rank is set after construction: the trainer sets its strategy's ranks when it is built.
    """
    environment = LightningEnvironment()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=logger,
        strategy=DDPStrategy(cluster_environment=environment),
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    environment.set_world_size(2)
    environment.set_global_rank(rank)
    return trainer


def write_everything(trainer: L.Trainer, path) -> None:
    log_metrics(trainer, {"x/value_count": 3.0}, step=7)
    set_tags(trainer, {"hpml.test": "yes"})
    log_text(trainer, "hello", "notes/hello.txt")
    log_file(trainer, path, "files")


def test_rank_zero_writes_metrics_tags_and_artifacts(root, client, run_id) -> None:
    path = root / "table.csv"
    path.write_text("a,b\n1,2\n")
    trainer = trainer_at_rank(
        0, AttachedMLFlowLogger(tracking_uri=client.tracking_uri, run_id=run_id)
    )
    assert trainer.is_global_zero and len(mlflow_loggers(trainer)) == 1
    write_everything(trainer, path)
    run = client.get_run(run_id)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "x/value_count")] == [
        (7, 3.0)
    ]
    assert run.data.tags["hpml.test"] == "yes"
    assert {a.path for a in client.list_artifacts(run_id)} == {"notes", "files"}


def test_other_ranks_write_nothing(root, client, run_id) -> None:
    path = root / "table.csv"
    path.write_text("a,b\n1,2\n")
    trainer = trainer_at_rank(
        1, AttachedMLFlowLogger(tracking_uri=client.tracking_uri, run_id=run_id)
    )
    assert not trainer.is_global_zero and mlflow_loggers(trainer) == []
    assert rank_zero_only.rank == 1  # restored by process_rank_restored after the test
    write_everything(trainer, path)
    run = client.get_run(run_id)
    assert "x/value_count" not in run.data.metrics
    assert "hpml.test" not in run.data.tags
    assert client.list_artifacts(run_id) == []
