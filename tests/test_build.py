"""Each part of a job is built once (:mod:`hpml.build`), validation building none: counted in a
single run and in a fused array of two, as they train."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import hydra.utils
import pytest
import torch

from tests.inprocess import multirun

SMALL = [
    "model=vae",
    "trainer.max_epochs=1",
    "data.limit=64",
    "data.batch_size=32",
    "trainer.enable_progress_bar=false",
]
PARTS = {  # what the default config builds, by class, and how many per member
    "SyntheticDataModule",
    "VAEModule",
    "VAEModule on meta",  # the model as planned, which validation reads
    "ModelStats",
    "PerformanceMonitor",
    "BoundMonitor",
    "TimeToTarget",
    "MemoryBreakdown",
    "EpochCheckpoint",
    "Canary",
    "MlflowTracker",
    "Trainer",
}


def name_of(made: Any) -> str:
    """``made``'s class name, with ``on meta`` for a model built on the meta device."""
    meta = isinstance(made, torch.nn.Module) and any(p.is_meta for p in made.parameters())
    return type(made).__name__ + (" on meta" if meta else "")


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The classes of the objects hpml makes from configs, counted as they are made:
    :func:`hpml.build.build` instantiates each through ``hydra.utils.instantiate(node,
    _partial_=True)``."""
    made: Counter = Counter()
    real = hydra.utils.instantiate

    def instantiate(node: Any, *args: Any, **kwargs: Any) -> Any:
        partial = real(node, *args, **kwargs)
        if not kwargs.get("_partial_"):
            return partial

        def make(*a: Any, **k: Any) -> Any:
            part = partial(*a, **k)
            made[name_of(part)] += 1
            return part

        return make

    monkeypatch.setattr(hydra.utils, "instantiate", instantiate)
    return made


@pytest.fixture
def loggers(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The ``logger`` group's trackers and the Lightning loggers of runs, counted as they are
    constructed, by whatever path (not only :func:`hpml.build.build`'s)."""
    from hpml.tracking.logger import AttachedMLFlowLogger
    from hpml.tracking.run import MlflowTracker

    made: Counter = Counter()
    for cls in (MlflowTracker, AttachedMLFlowLogger):

        def init(self: Any, *args: Any, _real: Any = cls.__init__, **kwargs: Any) -> None:
            made[type(self).__name__] += 1
            _real(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)
    return made


def test_a_single_run_builds_each_part_once(
    root: Path, composed, built: Counter, loggers: Counter
) -> None:
    from hpml.train import train

    metrics = train(composed(SMALL))
    assert "val/loss" in metrics
    assert {name: built[name] for name in PARTS} == dict.fromkeys(PARTS, 1)
    assert set(built) == PARTS
    assert loggers == Counter({"MlflowTracker": 1, "AttachedMLFlowLogger": 1})  # its run's


def test_a_fused_array_of_two_builds_each_members_parts_once(
    root: Path, client: Any, built: Counter, loggers: Counter
) -> None:
    lrs = ["model.optimizer.lr=0.01,0.02", "fuse=array", "fuse.force=true"]
    jobs = multirun([*SMALL, *lrs, "fuse.max_members=2"], root / "multirun")
    assert [job.status.name for job in jobs] == ["COMPLETED"] * 2
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    members = [run for run in runs if run.data.tags.get("hpml.fused") == "true"]
    assert sorted(run.info.status for run in members) == ["FINISHED"] * 2
    # each member its data, model and callbacks; the array one tracker and one trainer
    once = {"MlflowTracker", "Trainer"}
    assert {name: built[name] for name in PARTS} == {n: 1 if n in once else 2 for n in PARTS}
    # the array's tracker and the sweep's parent's own, made as it opens and as it closes; a
    # Lightning logger per member's run
    assert loggers == Counter({"MlflowTracker": 1 + 2, "AttachedMLFlowLogger": 2})


def test_validation_reads_the_built_parts_and_builds_none(
    root: Path, composed, built: Counter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a job with steps that ask for the model (pruning targets, eager int8 kernels)
    builds no part, nor the optimiser the builder tried on the planned model; the one real CPU
    net the int8 check runs is made by the builder's factory, once."""
    from hpml.build import build_parts
    from hpml.validate import check

    real_init = torch.optim.Optimizer.__init__

    def init(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        built[type(optimizer).__name__] += 1
        real_init(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Optimizer, "__init__", init)
    cfg = composed(["prune=l1_structured", "quant=static_int8", "trainer.max_epochs=1"])
    parts = build_parts(cfg)
    assert parts.refused == {}
    before = Counter(built)
    check(parts, cfg, None)
    assert before["ImageClassifier on meta"] == 1 and before["Adam"] == 1
    assert built - before == Counter({"ImageClassifier": 1})  # the int8 check's CPU net


def test_a_refused_optimiser_is_named_by_validation_before_training(composed) -> None:
    """The builder keeps what the planned model's optimiser raised (a combination of values no
    range refuses: torch's SGD takes Nesterov momentum only with some momentum); validation
    names it."""
    from hpml.build import build_parts
    from hpml.errors import HpmlError
    from hpml.validate import check

    overrides = [
        "model/optimizer=sgd",
        "model.optimizer.momentum=0",
        "+model.optimizer.nesterov=true",
    ]
    cfg = composed(overrides)
    parts = build_parts(cfg)
    assert set(parts.refused) == {"model.optimizer"}
    with pytest.raises(HpmlError, match=r"model\.optimizer") as raised:
        check(parts, cfg, None)
    assert "Nesterov" in str(raised.value)
