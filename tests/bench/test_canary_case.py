"""The ``canary`` case's jobs: registered, the start-up case's one-step run, differing only in
the canary callback."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from hpml.bench.__main__ import CASES
from hpml.bench.canary import RATIOS, VARIANTS, WITH, WITHOUT, overrides
from hpml.bench.harness import Settings
from hpml.bench.overhead import compose_in


def test_the_two_one_step_runs_differ_only_in_the_canary(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("HPML_ROOT", raising=False)
    settings = Settings()
    jobs = {
        name: OmegaConf.to_container(compose_in(tmp_path, [*overrides(settings, tmp_path), *x]))
        for name, x in VARIANTS.items()
    }
    with_canary, without = jobs[WITH], jobs[WITHOUT]
    assert with_canary["callbacks"]["canary"]["_target_"] == "hpml.callbacks.canary.Canary"
    assert "canary" not in without["callbacks"]
    assert with_canary["trainer"]["max_steps"] == 1 and with_canary["test"] is False
    assert with_canary["threads"] == settings.threads
    for cfg in (with_canary, without):  # each job has its own output directory
        cfg.pop("paths", None)
        cfg["callbacks"].pop("canary", None)
        cfg["callbacks"]["checkpoint"].pop("dirpath", None)
    assert with_canary == without
    (ratio,) = RATIOS
    assert (ratio.numerator, ratio.denominator) == (WITH, WITHOUT)
    assert "canary" in CASES
