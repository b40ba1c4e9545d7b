"""Scaling model arithmetic: exact lines are recovered, the largest batch respects capacity."""

from __future__ import annotations

import pytest

from hpml.analysis.scaling import ScalingModel, fit_line
from hpml.errors import HpmlError


def test_exact_lines_are_recovered_and_predictions_follow():
    batches = [8, 16, 64]
    model = ScalingModel.fit(
        batches, [0.01 + 0.002 * b for b in batches], [1000 + 50 * b for b in batches]
    )
    assert model.step_time_s.intercept == pytest.approx(0.01)
    assert model.step_time_s.slope == pytest.approx(0.002)
    p = model.predict(32, capacity_bytes=2600)
    assert p.step_time_s == pytest.approx(0.074)
    assert p.throughput_samples_per_s == pytest.approx(32 / 0.074)
    assert p.memory_bytes == pytest.approx(2600) and p.fits
    assert model.largest_batch(2600) == 32
    assert model.predict(33, capacity_bytes=2600).fits is False


def test_one_batch_size_is_not_enough():
    with pytest.raises(HpmlError, match="two or more batch sizes"):
        fit_line([32, 32], [1.0, 1.1])
