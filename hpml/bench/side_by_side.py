"""Case ``side_by_side``: what timing before and after side by side costs a study's job.

Both variants run one job of study 3 (``experiment=vae_pruning``) through ``hpml.train.train``:
``side by side`` at the measurement defaults (``conf/base/measure.yaml``), and ``one round``,
the least a before/after can time. The ratio is their wall time, after one untimed job that
pays for the imports; each job's own speed-up is noted, to show both measured something.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig

from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.bench.overhead import compose_in, quiet_lightning, train_quietly
from hpml.names import speedup

SIDE_BY_SIDE, ONE_ROUND = "side by side", "one round"
SECONDS = "job_wall_s"
SPEEDUP = speedup("prune", 1)
RATIOS = (
    Ratio(
        "study job wall time (goal <= 1.15)",
        SECONDS,
        "s",
        SIDE_BY_SIDE,
        ONE_ROUND,
        goal=1.15,
        at_most=True,
    ),
)
VARIANTS: dict[str, tuple[str, ...]] = {
    SIDE_BY_SIDE: (),
    ONE_ROUND: ("prune.latency_rounds=1", "prune.latency_budget_s=0"),
}


def overrides(root: Path) -> list[str]:
    """One job of the study as its sweep would launch it, in the bench's own store."""
    return [
        "experiment=vae_pruning",
        "prune=l1_structured",
        "prune.amount=0.5",
        "++trainer.enable_progress_bar=false",
        "logger.experiment_name=bench_side_by_side",
        f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
    ]


def compose(root: Path, extra: Sequence[str]) -> DictConfig:
    """The job's config, a fresh output directory under ``root``."""
    return compose_in(root, [*overrides(root), *extra])


def run_job(root: Path, extra: Sequence[str], settings: Settings) -> Measurement:
    """Wall seconds of one ``train`` call, and the speed-up its run logged."""
    import mlflow

    cfg = compose(root, extra)
    start = time.perf_counter()
    train_quietly(cfg, settings)
    seconds = time.perf_counter() - start
    run = mlflow.last_active_run()
    logged = run.data.metrics if run is not None else {}
    return {SECONDS: seconds, SPEEDUP: logged.get(SPEEDUP, float("nan"))}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    root = (bench_dir / "hpml").resolve()
    quiet_lightning()
    variants = {name: partial(run_job, root, extra, settings) for name, extra in VARIANTS.items()}
    run_job(root, VARIANTS[ONE_ROUND], settings)  # untimed: the first job imports and warms up
    notes = {
        "job": overrides(root),
        **{f"overrides {name}": list(extra) for name, extra in VARIANTS.items()},
        "device": "cpu",
        "torch": torch.__version__,
        "timing": "wall seconds of hpml.train.train, config composed outside the window",
    }
    return run_case("side_by_side", variants, RATIOS, settings, report, notes)
