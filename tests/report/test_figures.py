"""The report's pieces that need no store: metric headings with units, the Pareto front."""

from __future__ import annotations

import pytest

from hpml import names
from hpml.report.figures import pareto
from hpml.report.search import axis_heights


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
    units = [u for u in units if u not in (names.STAGE, names.MEMBER_PREFIX, *names.SIDES)]
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
    heights, ticks = axis_heights(["7", "7"])  # one value: no span to divide by
    assert heights == [0.0, 0.0] and ticks == [(0.0, "7")]
