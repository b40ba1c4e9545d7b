"""Time to a target: against a test callback's own clock, stopping, a target never met, refusals."""

from __future__ import annotations

import time

import lightning as L
import pytest
import torch
from torch import nn

from hpml.callbacks.target import TimeToTarget, infer_mode
from hpml.errors import ConfigError
from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.store import experiment_id
from hpml.train import job_parts

TIME, EPOCHS = "train/time_to_target_s", "train/epochs_to_target_count"
SCORES = [0.2, 0.5, 0.95, 0.97, 0.99]  # val/score by epoch: 0.9 is first met at epoch 3


class Scripted(L.LightningModule):
    """A tiny model whose ``val/score`` follows ``SCORES``, and whose steps take real time."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.02)
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        time.sleep(0.01)
        self.log("val/score", SCORES[self.current_epoch], on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(4, 4), batch_size=2)


class Clock(L.Callback):
    """Its own readings at training start and at each validation's end: the independent clock."""

    def __init__(self) -> None:
        self.start = 0.0
        self.validation_ends: list[float] = []

    def on_train_start(self, trainer, pl_module):
        self.start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.validation_ends.append(time.perf_counter())


def fit(root, client, target: TimeToTarget, max_epochs: int = 4):
    run_id = client.create_run(experiment_id(client, "hpml", str(root / "mlartifacts"))).info.run_id
    clock = Clock()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        logger=AttachedMLFlowLogger(tracking_uri=client.tracking_uri, run_id=run_id),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,  # the sanity check neither starts the clock nor meets the target
        callbacks=[clock, target],  # the clock reads just before: the target's logging after
    )
    trainer.fit(Scripted())
    return client.get_run(run_id), clock, trainer


def test_time_to_target_is_the_wall_time_to_the_validation_that_met_it(root, client):
    run, clock, trainer = fit(root, client, TimeToTarget("val/score", 0.9, mode="max"))
    assert run.data.metrics[EPOCHS] == 3
    expected = clock.validation_ends[2] - clock.start  # the third epoch's validation
    assert run.data.metrics[TIME] == pytest.approx(expected, abs=0.02)
    assert expected > clock.validation_ends[1] - clock.start + 0.05  # a later epoch differs
    assert trainer.current_epoch == 4 and len(clock.validation_ends) == 4  # went on
    assert run.data.tags["hpml.target"] == "val/score >= 0.9"
    assert run.data.tags["hpml.target.met"] == "true"
    history = client.get_metric_history(run.info.run_id, TIME)
    assert len(history) == 1  # logged once, when first met


def test_stop_ends_training_after_the_epoch_that_met_it(root, client):
    run, clock, trainer = fit(root, client, TimeToTarget("val/score", 0.9, mode="max", stop=True))
    assert run.data.metrics[EPOCHS] == 3
    assert len(clock.validation_ends) == 3 and trainer.current_epoch == 3


def test_a_target_never_met_logs_no_time_and_says_so(root, client):
    run, clock, _ = fit(root, client, TimeToTarget("val/score", 0.999, mode="max"), max_epochs=2)
    assert TIME not in run.data.metrics and EPOCHS not in run.data.metrics
    assert run.data.tags["hpml.target.met"] == "false"
    assert len(clock.validation_ends) == 2


def test_min_mode_and_what_null_infers():
    assert infer_mode("val/acc") == "max" and infer_mode("val/loss") == "min"
    assert TimeToTarget("val/loss", 0.5).mode == "min"
    assert TimeToTarget("val/acc", 0.5, mode="min").mode == "min"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["callbacks.target.metric=val/acc"], "callbacks.target.value=None is invalid"),
        (["callbacks.target.value=0.9"], "callbacks.target.metric=None is invalid"),
        (
            ["callbacks.target.metric=val/acc", "callbacks.target.value=high"],
            "callbacks.target.value='high' is invalid: expected a finite number",
        ),
        (["callbacks.target.mode=up"], "callbacks.target.mode='up' is invalid"),
    ],
)
def test_bad_targets_are_refused_before_training(composed, overrides, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        job_parts(composed(overrides), None)


def test_a_metric_the_model_does_not_log_fails_at_the_first_validation(root, client):
    with pytest.raises(ConfigError, match=r"callbacks\.target\.metric='val/acc'.*val/score"):
        fit(root, client, TimeToTarget("val/acc", 0.5), max_epochs=1)
