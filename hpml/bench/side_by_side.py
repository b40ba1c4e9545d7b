"""Case ``side_by_side``: what timing before and after side by side costs a study's job.

Both variants run one job of study 3 (``experiment=vae_pruning``: physical L1 pruning to 0.5)
in this process through ``hpml.train.train``, as a sweep's job runs: ``side by side`` at the
measurement defaults (``conf/base/measure.yaml``: rounds of the unpruned and pruned nets
alternating, more while the speed-up's interval is wide and the budget lasts), and ``one
round``, the least a before/after can time (``prune.latency_rounds=1``, no budget).

The ratio is the job's wall time, side by side / one round, after one untimed job (the first in
a process pays for imports); goal: at most 1.15. Each job's own speed-up at batch 1 is noted, to
show both measured something.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
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
    """Wall seconds of one ``train`` call (its MLflow run included), and its own speed-up as
    its run logged it."""
    import mlflow

    cfg = compose(root, extra)
    start = time.perf_counter()
    train_quietly(cfg, settings)
    seconds = time.perf_counter() - start
    run = mlflow.last_active_run()
    logged = run.data.metrics if run is not None else {}
    return {SECONDS: seconds, SPEEDUP: logged.get(SPEEDUP, float("nan"))}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    """Interleave the two variants for ``settings.rounds`` rounds in this process."""
    root = (bench_dir / "hpml").resolve()
    quiet_lightning()
    variants = {
        name: (lambda extra=extra: run_job(root, extra, settings))
        for name, extra in VARIANTS.items()
    }
    run_job(root, VARIANTS[ONE_ROUND], settings)  # untimed: the first job imports and warms up
    notes = {
        "job": overrides(root),
        **{f"overrides {name}": list(extra) for name, extra in VARIANTS.items()},
        "device": "cpu",
        "torch": torch.__version__,
        "timing": "wall seconds of hpml.train.train, config composed outside the window",
    }
    return run_case("side_by_side", variants, RATIOS, settings, report, notes)
