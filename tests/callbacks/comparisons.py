"""What every before/after comparison logs (hpml.callbacks.measure), checked on a finished run."""

from __future__ import annotations

from mlflow.entities import Run

from hpml.analysis.stats import Interval, verdict


def assert_side_by_side(run: Run, name: str, batches: tuple[int, ...], rounds: int) -> None:
    """Both sides' medians and IQRs, and per batch size a speed-up inside its interval, with
    n = ``rounds``, and the verdict tag :func:`verdict` gives for that interval."""
    m, tags = run.data.metrics, run.data.tags
    for batch in batches:
        for side in (f"{name}_before", f"{name}_after"):
            assert m[f"{side}/latency_b{batch}_ms"] > 0, side
            assert m[f"{side}/latency_b{batch}_iqr_ms"] >= 0, side
            assert f"{side}/latency_b{batch}_p90_ms" not in m
        quantity = f"{name}/speedup_b{batch}"
        low, mid, high = m[f"{quantity}_ci_low_x"], m[f"{quantity}_x"], m[f"{quantity}_ci_high_x"]
        n = m[f"{quantity}_rounds_count"]
        assert low <= mid <= high and n == rounds
        interval = Interval(mid, low, high, int(n), 0.0)
        assert tags[f"hpml.verdict.{name}.speedup_b{batch}"] == verdict(interval)
    assert " vs " in tags[f"hpml.compare.{name}.devices"]
