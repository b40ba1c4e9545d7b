"""The report's pieces that need no store: metric headings with units, the Pareto front."""

from __future__ import annotations

import re

import pytest

from hpml import names
from hpml.report.canvas import distinct_labels, fit
from hpml.report.figures import pareto
from hpml.report.figures.memory import MEMORY_PARTS, memory
from hpml.report.search import axis_heights, spaced


@pytest.mark.parametrize(
    ("name", "heading"),
    [
        ("train/throughput_samples_per_s", "train/throughput (samples/s)"),
        ("train/achieved_flops_per_s", "train/achieved (FLOP/s, 2 x MAC)"),
        ("model/fwd_flops_per_sample", "model/fwd (FLOPs/sample, 2 x MAC)"),
        ("roofline/intensity_flop_per_byte", "roofline/intensity (FLOP/byte)"),
        ("train/epoch_time_s", "train/epoch_time (s)"),
        ("quant_after/latency_b1_ms", "quant_after/latency_b1 (ms)"),
        ("prune/flops_x", "prune/flops (x, before/after)"),
        ("val/loss", "val/loss"),  # a model's own name: outside the convention, left as is
    ],
)
def test_every_heading_says_its_unit(name: str, heading: str) -> None:
    assert names.label(name) == heading


def test_every_unit_hpml_logs_has_a_heading() -> None:
    units = [v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)]
    units = [u for u in units if "/" not in u and not u.startswith("hpml.")]
    named = (names.STAGE, names.MEMBER_PREFIX, *names.SIDES, *names.BOUNDS, *names.STAGES)
    units = [u for u in units if u not in (*named, names.DATA_WAIT, names.HOST_ISSUE)]
    assert set(units) <= set(names.UNIT_LABELS)
    for unit in units:
        assert names.unit_of(f"stage/quantity_{unit}") == unit


def test_pareto_front_keeps_the_points_nothing_beats_in_both() -> None:
    points = [(10.0, 5.0), (4.0, 9.0), (12.0, 6.0), (4.0, 9.0), (20.0, 1.0), (11.0, 5.0)]
    # (12, 6) and (11, 5) lose to (10, 5); the duplicate (4, 9) pair is kept (nothing beats it)
    assert pareto(points) == [0, 1, 3, 4]


def test_parallel_axes_scale_numbers_and_space_categories() -> None:
    heights, ticks = axis_heights(["1", "3", "2"])
    assert heights == [0.0, 1.0, 0.5] and [t for _, t in ticks] == ["1", "2", "3"]
    heights, _ = axis_heights(["1e-4", "1e-2", "1e-3"])  # spans 100x: a log axis
    assert heights == pytest.approx([0.0, 1.0, 0.5])
    heights, ticks = axis_heights(["vgg11", "alexnet", "vgg11"])
    assert heights == [1.0, 0.0, 1.0] and ticks == [(0.0, "alexnet"), (1.0, "vgg11")]
    # vgg_pruning's val/loss: 53.2 and five runs between 1.9 and 6.8, three labels apart
    _, ticks = axis_heights(["53.21", "6.823", "2.325", "2.249", "2.08", "1.898"])
    assert [text for _, text in ticks] == ["1.9", "6.82", "53.2"]
    assert spaced([(0.0, "a"), (0.5, "b"), (0.97, "c"), (1.0, "d")]) == [
        (0.0, "a"),
        (0.5, "b"),
        (1.0, "d"),
    ]
    heights, ticks = axis_heights(["7", "7"])  # one value: no span to divide by
    assert heights == [0.0, 0.0] and ticks == [(0.0, "7")]


def _run(job: int | None, replicate: int, name: str):
    """A run of a VGG11 pruning config, as its store reads it back: only replicate differs."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    params = {"model.name": "vgg11", "prune.amount": "0.5", "replicate": str(replicate)}
    metrics = {f"memory/{p}_bytes": 1e6 for p in MEMORY_PARTS} | {"memory/peak_bytes": 9e8}
    tags = {"hpml.choice.model": "vgg11"} | ({} if job is None else {"hpml.job_num": str(job)})
    return Run(
        RunInfo(f"run{replicate}", "0", "", "FINISHED", 0, 1, "active", run_name=name),
        RunData(
            [Metric(k, v, 0, 0) for k, v in metrics.items()],
            [Param(k, v) for k, v in params.items()],
            [RunTag(k, v) for k, v in tags.items()],
        ),
    )


LONG = "vgg11/synthetic [data.limit=512,model=vgg11,prune.amount=0.5,replicate={}]"
KEYS = ["model", "prune.amount", "replicate"]


def test_plot_labels_name_only_what_varies_shortened() -> None:
    runs = [_run(job, job, LONG.format(job)) for job in (0, 1)]
    assert distinct_labels(runs, KEYS) == ["replicate=0", "replicate=1"]
    assert distinct_labels(runs, ["prune.amount", "data.limit"]) == ["job 0", "job 1"]
    alone = [_run(None, r, LONG.format(r)) for r in (0, 1)]  # runs picked one by one
    assert distinct_labels(alone, []) == ["vgg11/synthetic (run0)", "vgg11/synthetic (run1)"]
    assert distinct_labels(alone, ["replicate"], named=False) == ["0", "1"]


def test_labels_are_wrapped_and_cut_to_the_plot() -> None:
    assert fit("prune=fpgm") == "prune=fpgm"
    text = "prune=l1_structured, amount=0.5, replicate=0, " * 3
    lines = fit(text, 20).split("\n")
    assert len(lines) == 2 and all(len(line) <= 20 for line in lines)
    assert lines[0] == "prune=l1_structured," and lines[1].endswith("\u2026")
    assert fit("a_very_long_unbroken_key_name", 10, 1) == "a_very_lo\u2026"


def test_memory_bars_of_repeats_are_named_by_replicate() -> None:
    runs = [_run(job, job, LONG.format(job)) for job in (0, 1)]
    figure = memory(runs, [])  # the configs' keys: none varies, repeats are one config
    assert figure is not None
    texts = re.findall(r"<!-- (.*?) -->", figure.svg)
    assert {"0", "1", "run (replicate)"} <= set(texts)
    assert not [t for t in texts if "synthetic" in t]  # the whole name: in the tooltips only
    assert f"<title>{LONG.format(1)}: replicate=1\n" in figure.svg
    assert "Here the peak is 220x the tensors' total." in figure.caption  # one ratio, said once
