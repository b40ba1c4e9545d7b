"""EpochCheckpoint on a tiny model: last is the latest epoch, saves follow the timed windows."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import model_checkpoint
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hpml.callbacks.checkpoint import EpochCheckpoint


class WorseningModel(L.LightningModule):
    """``val/loss`` = the epoch number: epoch 0 stays the best, every later epoch is worse."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", float(self.current_epoch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Recorder(L.Callback):
    """Order of epoch ends (where the performance monitor closes its window) and saves."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.events.append(("epoch_end", trainer.current_epoch))

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict
    ) -> None:
        self.events.append(("save", trainer.current_epoch))


def loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


class ImprovingModel(WorseningModel):
    """``val/loss`` = minus the epoch number: every epoch is the best so far."""

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", -float(self.current_epoch))


def fit(
    dirpath: Path,
    epochs: int,
    ckpt_path: str | None = None,
    model: type[L.LightningModule] = WorseningModel,
) -> tuple[EpochCheckpoint, Recorder]:
    checkpoint = EpochCheckpoint(
        dirpath=str(dirpath),
        filename="best",
        monitor="val/loss",
        save_last=True,
        enable_version_counter=False,
    )
    recorder = Recorder()
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint, recorder],
    )
    trainer.fit(model(), loader(), loader(), ckpt_path=ckpt_path, weights_only=False)
    return checkpoint, recorder


def epoch_of(path: Path) -> int:
    return torch.load(path, weights_only=False)["epoch"]


def test_last_is_the_latest_epoch_and_best_the_best_saved_after_each_epoch_end(tmp_path):
    _, recorder = fit(tmp_path, epochs=3)
    assert epoch_of(tmp_path / "last.ckpt") == 2  # Lightning 2.6 alone leaves epoch 0 here
    assert epoch_of(tmp_path / "best.ckpt") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "last.ckpt"]
    for epoch in range(3):  # every save of an epoch comes after that epoch's end hooks
        saves = [i for i, event in enumerate(recorder.events) if event == ("save", epoch)]
        assert saves and min(saves) > recorder.events.index(("epoch_end", epoch)), recorder.events


def test_a_best_epochs_last_is_its_best_file_and_a_later_epoch_breaks_the_link(tmp_path):
    fit(tmp_path / "up", epochs=2, model=ImprovingModel)
    last, best = tmp_path / "up" / "last.ckpt", tmp_path / "up" / "best.ckpt"
    assert last.samefile(best) and last.stat().st_nlink == 2  # written once, named twice
    assert epoch_of(last) == 1
    fit(tmp_path / "down", epochs=2)  # epoch 0 linked both names; epoch 1 wrote last alone
    last, best = tmp_path / "down" / "last.ckpt", tmp_path / "down" / "best.ckpt"
    assert not last.samefile(best) and best.stat().st_nlink == 1
    assert (epoch_of(last), epoch_of(best)) == (1, 0)


def test_resume_in_another_folder_keeps_the_best_score(tmp_path):
    first, _ = fit(tmp_path / "a", epochs=2)
    resumed, _ = fit(tmp_path / "b", epochs=4, ckpt_path=str(tmp_path / "a" / "last.ckpt"))
    assert resumed.best_model_score == 0.0  # epoch 0's, not the first epoch after the resume
    assert resumed.best_model_path == first.best_model_path
    assert epoch_of(tmp_path / "b" / "last.ckpt") == 3
    assert not (tmp_path / "b" / "best.ckpt").exists()  # no later epoch beat epoch 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["best.ckpt", "last.ckpt"]


def test_default_callbacks_checkpoint_and_enable_checkpointing_false_drops_it(composed):
    from hpml.build import build_callbacks

    default = [c for c in build_callbacks(composed([])) if isinstance(c, EpochCheckpoint)]
    assert len(default) == 1
    assert default[0].monitor == "val/loss" and default[0].dirpath.endswith("checkpoints")
    off = build_callbacks(composed(["trainer.enable_checkpointing=false"]))
    assert not [c for c in off if isinstance(c, EpochCheckpoint)]


def test_an_epoch_cut_short_before_validation_saves_last_and_warns_nothing(tmp_path):
    """``trainer.max_steps`` reached mid-epoch: no validation ran, so there is no best to keep;
    ``last.ckpt`` is written and Lightning's "could not find the monitored key" is not."""
    model_checkpoint.warning_cache.clear()  # Lightning warns once per process
    checkpoint = EpochCheckpoint(dirpath=str(tmp_path), filename="best", monitor="val/loss")
    checkpoint.save_last = True
    trainer = L.Trainer(
        max_steps=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(WorseningModel(), loader(), loader())
    assert not [w for w in caught if "monitored key" in str(w.message)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_monitor_validation_never_logs_still_fails_the_fit(tmp_path):
    checkpoint = EpochCheckpoint(dirpath=str(tmp_path), monitor="val/los", save_last=True)
    trainer = L.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, callbacks=[checkpoint]
    )
    with pytest.raises(MisconfigurationException, match="val/los"):
        trainer.fit(WorseningModel(), loader(), loader())
