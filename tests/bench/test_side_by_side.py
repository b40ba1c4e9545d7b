"""The ``side_by_side`` case's jobs: registered, one study job, differing only in rounds (the
one-round job with no budget for more)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from hpml.bench.__main__ import CASES
from hpml.bench.side_by_side import ONE_ROUND, RATIOS, SIDE_BY_SIDE, VARIANTS, compose


def test_the_two_jobs_differ_only_in_latency_rounds(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("HPML_ROOT", raising=False)
    side, one = (OmegaConf.to_container(compose(tmp_path, VARIANTS[n])) for n in VARIANTS)
    assert side["prune"]["latency_rounds"] == 9 and one["prune"]["latency_rounds"] == 1
    assert side["prune"]["latency_budget_s"] > 0 and one["prune"]["latency_budget_s"] == 0
    assert side["prune"]["latency_clock"] == one["prune"]["latency_clock"] == "auto"
    one["prune"]["latency_rounds"] = 9
    one["prune"]["latency_budget_s"] = side["prune"]["latency_budget_s"]
    for cfg in (side, one):  # each job has its own output directory
        cfg.pop("paths", None)
        cfg.get("callbacks", {}).get("checkpoint", {}).pop("dirpath", None)
    assert side == one
    assert side["prune"]["method"]["_target_"].endswith(".L1Structured")
    assert side["prune"]["amount"] == 0.5
    assert side["model"]["_target_"].endswith("VAEModule")
    (ratio,) = RATIOS
    assert (ratio.numerator, ratio.denominator, ratio.goal, ratio.at_most) == (
        SIDE_BY_SIDE,
        ONE_ROUND,
        1.15,
        True,
    )
    assert "side_by_side" in CASES
