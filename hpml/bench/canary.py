"""Case ``canary``: what the canary (``callbacks.canary``) costs a one-step run.

Both variants run the start-up case's one-step run (``trainer.max_steps=1 test=false`` at the
defaults: VGG11, synthetic CIFAR-sized images, every default callback) through
``hpml.train.train`` in this process, into the bench's own store: ``with canary`` as
configured, ``without canary`` with ``~callbacks.canary``. The ratio is their wall time, the
config composed outside the window, after one untimed job of each (first imports, the store's
tables, the canary's first GEMM); the canary's own seconds are the difference of the medians.
The canary is meant to cost at most 0.15 s, start and end together, so that the one-step run
keeps within 1.2x the stack's import (case ``startup``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch

from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.bench.overhead import compose_in, quiet_lightning, train_quietly

WITH, WITHOUT = "with canary", "without canary"
SECONDS = "run_wall_s"
RATIOS = (Ratio("one-step run wall time", SECONDS, "s", WITH, WITHOUT),)
VARIANTS: dict[str, tuple[str, ...]] = {WITH: (), WITHOUT: ("~callbacks.canary",)}


def overrides(settings: Settings, root: Path) -> list[str]:
    """The start-up case's one-step run, in the bench's own store."""
    return [
        "++trainer.max_steps=1",
        "test=false",
        f"threads={settings.threads}",
        "++trainer.enable_progress_bar=false",
        "logger.experiment_name=bench_canary",
        f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
    ]


def run_job(root: Path, extra: Sequence[str], settings: Settings) -> Measurement:
    """Wall seconds of one ``train`` call."""
    cfg = compose_in(root, [*overrides(settings, root), *extra])
    start = time.perf_counter()
    train_quietly(cfg, settings)
    return {SECONDS: time.perf_counter() - start}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    root = (bench_dir / "hpml").resolve()
    quiet_lightning()
    variants = {name: partial(run_job, root, extra, settings) for name, extra in VARIANTS.items()}
    for variant in variants.values():  # untimed: imports, the store, the first GEMM
        variant()
    notes = {
        "job": overrides(settings, root),
        **{f"overrides {name}": list(extra) for name, extra in VARIANTS.items()},
        "device": "cpu",
        "torch": torch.__version__,
        "timing": "wall seconds of hpml.train.train, config composed outside the window",
        "canary_budget_s": 0.15,
    }
    return run_case("canary", variants, RATIOS, settings, report, notes)
