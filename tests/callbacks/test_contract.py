"""A callback that declares nothing works in every mode: a plain Lightning callback and an
:class:`~hpml.callbacks.base.HpmlCallback` that overrides nothing, defined here, outside hpml,
train in a single run and make a ``fuse=array`` sweep run one job at a time, with one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest

from hpml.callbacks.base import HpmlCallback
from tests.inprocess import multirun
from tests.test_build import SMALL


class Plain(L.Callback):
    """Counts the training epochs it saw, as a user's own callback might."""

    epochs = 0

    def on_train_epoch_end(self, *_: Any) -> None:
        Plain.epochs += 1


class Silent(HpmlCallback):
    """Overrides nothing hpml asks of a callback."""


MINE = {
    Plain: "does not say how it runs in an array (in_array: per member, once, not in arrays "
    "or serial)",
    Silent: "runs only in a job of its own (its in_array: serial)",
}


@pytest.mark.parametrize("mine", list(MINE), ids=lambda c: c.__name__)
def test_a_callback_that_declares_nothing_trains_alone_and_in_a_fused_sweep(
    mine: type, root: Path, composed, client: Any, capsys: pytest.CaptureFixture
) -> None:
    from hpml.train import train

    Plain.epochs = 0
    added = f"+callbacks.mine._target_={__name__}.{mine.__name__}"
    assert "val/loss" in train(composed([*SMALL, added]))
    jobs = multirun(
        [*SMALL, added, "model.optimizer.lr=0.01,0.02", "fuse=array", "fuse.force=true"],
        root / "multirun",
    )
    assert [job.status.name for job in jobs] == ["COMPLETED"] * 2
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert len(runs) == 4  # the single run, the sweep's parent and its two jobs
    assert {run.info.status for run in runs} == {"FINISHED"}
    assert not any("hpml.fused" in run.data.tags for run in runs)
    lines = [line for line in capsys.readouterr().out.splitlines() if "fuse=array" in line]
    assert lines == [
        f"hpml: fuse=array: not fusing: callbacks.mine is set, and {__name__}.{mine.__name__} "
        f"{MINE[mine]}; running the 2 jobs one by one"
    ]
    assert Plain.epochs == (3 if mine is Plain else 0)


def test_the_lifecycle_asks_callbacks_nothing_by_probing() -> None:
    """What a callback and a model may tell the lifecycle is declared on their base classes, so
    the modules that build, check and run a job probe no object for an attribute (``hasattr``):
    at most one such probe in them all, none today."""
    hpml = Path(__file__).resolve().parents[2] / "hpml"
    places = [hpml / "validate", hpml / "fused", hpml / "callbacks"]
    files = [hpml / "lifecycle.py", hpml / "build.py"]
    files += [path for place in places for path in sorted(place.rglob("*.py"))]
    probes = [
        f"{path.relative_to(hpml)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "hasattr(" in line
    ]
    assert len(probes) <= 1, probes
