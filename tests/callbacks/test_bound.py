"""What bounds a run (``hpml.bound.<stage>``): the rules, an ImageFolder of large JPEGs that a
loader with no workers cannot feed, the default run that it can, and the verdict of a
comparison neither side of which measured the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from hpml.analysis.bound import Thresholds, classify
from hpml.names import COMPUTE, DEVICE, HOST, INPUT, MEMORY, THROUGHPUT, bound_tag
from hpml.report.groups import group, versus
from hpml.report.pairs import by_key
from tests.inprocess import multirun

JPEG_SIDE = 1200  # px: tens of milliseconds to decode each, read at 32 px


@pytest.mark.parametrize(
    ("evidence", "kind"),
    [
        ({"data_wait_pct": 65.0}, INPUT),
        ({"data_wait_pct": 5.0, "host_issue_pct": 99.0}, INPUT),  # at the threshold: input
        ({"data_wait_pct": 1.0, "host_issue_pct": 95.0}, HOST),
        ({"data_wait_pct": 1.0, "host_issue_pct": 40.0}, DEVICE),
        ({"data_wait_pct": 1.0}, DEVICE),  # a CPU: no host figure
        ({"data_wait_pct": 1.0, "roofline": (12.0, 40.0)}, MEMORY),
        ({"data_wait_pct": 1.0, "roofline": (90.0, 40.0)}, COMPUTE),
        ({"data_wait_pct": 1.0, "host_issue_pct": 95.0, "roofline": (90.0, 40.0)}, HOST),
    ],
)
def test_rules(evidence: dict, kind: str) -> None:
    bound = classify("train", **evidence)
    assert bound.kind == kind
    assert bound.source == ("roofline" if kind in (MEMORY, COMPUTE) else None)
    assert f"{evidence['data_wait_pct']:.0f}% of a step waits for data" in bound.why


def test_thresholds_move_the_classes() -> None:
    assert classify("val", 20.0, thresholds=Thresholds(input_pct=25.0)).kind == DEVICE
    assert classify("val", 1.0, 80.0, thresholds=Thresholds(host_pct=75.0)).kind == HOST
    line = classify("train", 65.4, loader="data.placement=loader, data.num_workers=0").line()
    assert line == (
        "train bound by input: 65% of a step waits for data "
        "(data.placement=loader, data.num_workers=0)"
    )


def large_jpegs(root: Path, per_class: int) -> None:
    """ImageFolder train/ and val/ of two classes of noisy JPEGs, JPEG_SIDE px a side."""
    import numpy as np

    rng = np.random.default_rng(0)
    for split, count in (("train", per_class), ("val", 2)):
        for name in ("n01", "n02"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (JPEG_SIDE, JPEG_SIDE, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{name}_{i}.JPEG", quality=90)


@pytest.fixture(scope="module")
def jpeg_sweep(tmp_path_factory: pytest.TempPathFactory, store_template: Path):
    """ResNet18 with and without channels_last, reading large JPEGs at 32 px through a loader
    with no workers: its runs."""
    import shutil

    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("bound")
    large_jpegs(root / "imagenet", per_class=4)
    shutil.copy(store_template, root / "mlflow.db")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HPML_ROOT", str(root))
        jobs = sweep_jobs(root)
    assert [job.status.name for job in jobs] == ["COMPLETED"] * 2
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("hpml").experiment_id
    runs = client.search_runs([experiment], "attributes.status = 'FINISHED'")
    return [run for run in runs if "hpml.sweep_parent" not in run.data.tags]


def sweep_jobs(root: Path) -> list:
    return multirun(
        [
            "model=resnet18",
            "data=imagenet",
            f"data.data_dir={root / 'imagenet'}",
            "data.image_size=32",
            "data.batch_size=4",
            "data.num_workers=0",
            "trainer.max_epochs=1",
            "++trainer.limit_val_batches=1",
            "test=false",
            "trainer.enable_checkpointing=false",
            "trainer.enable_progress_bar=false",
            "callbacks.perf.warmup_steps=1",
            "callbacks.perf.measured_peak=false",
            f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
            "model.channels_last=true,false",
        ],
        root / "multirun",
    )


def test_large_jpegs_read_with_no_workers_are_input_bound(jpeg_sweep) -> None:
    assert len(jpeg_sweep) == 2
    for run in jpeg_sweep:
        wait = run.data.metrics["train/data_wait_pct"]
        assert run.data.tags[bound_tag("train")] == INPUT, wait
        assert run.data.tags[bound_tag("train", "why")] == (
            f"{wait:.0f}% of a step waits for data (data.placement=loader, data.num_workers=0)"
        )
        assert run.data.params["data.chosen.placement"] == "loader"


def test_a_comparison_of_two_input_bound_sides_calls_neither_faster(jpeg_sweep) -> None:
    """``--by model.channels_last`` on throughput: ``input-bound``, the ratio still shown; the
    same runs compared as if the key fed their input get a verdict of their own."""
    compared = by_key(jpeg_sweep, "model.channels_last")
    [speed] = [c for c in compared.comparisons if c.measure == THROUGHPUT]
    assert speed.verdict == "input-bound" and speed.ratio > 0
    sides = group(jpeg_sweep)
    assert len(sides) == 2
    [ungated] = [c for c in versus(*sides, "as data", feeds_input=True) if c.measure == THROUGHPUT]
    assert ungated.verdict in ("faster", "slower", "within noise")
    assert ungated.ratio == pytest.approx(speed.ratio) or ungated.ratio == pytest.approx(
        1 / speed.ratio
    )


@pytest.mark.usefixtures("alone")
def test_the_default_run_is_not_input_bound(root: Path, composed, client) -> None:
    """VGG11 on synthetic images held on the device: the step, not the data, bounds it."""
    from hpml.train import train

    train(
        composed(
            [
                "trainer.max_epochs=1",
                # four steps of 64: a step of VGG11 at 32 px is then about a hundred times the
                # loop's own time between steps on 2 cores (counted as data wait)
                "data.train_samples=256",
                "data.val_samples=64",
                "data.batch_size=64",
                "callbacks.perf.measured_peak=false",
                "test=false",
                "trainer.enable_progress_bar=false",
                "callbacks.perf.warmup_steps=1",
            ]
        )
    )
    [run] = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert run.data.tags[bound_tag("train")] == DEVICE
    assert run.data.metrics["train/data_wait_pct"] < Thresholds().input_pct
    # the memory breakdown, measured on the first step, is logged once the epoch's figures are:
    # outside the window the data wait is read from (ms timestamps)
    [memory] = client.get_metric_history(run.info.run_id, "memory/peak_bytes")
    [wait] = client.get_metric_history(run.info.run_id, "train/data_wait_pct")
    assert memory.timestamp >= wait.timestamp
