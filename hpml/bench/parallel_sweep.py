"""Case ``parallel_sweep``: the same 4-job sweep on Hydra's basic launcher and on joblib.

Each variant is a whole ``python -m hpml.train -m ...`` command, timed from start to exit:
the basic launcher runs the jobs in turn, joblib two at once in reused workers. The start-up
variants fit and test nothing: their time per job is what a launch costs before training.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hpml.bench import startup
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case

JOBS = 4
BATCH_SIZE = 64
BASIC, JOBLIB = "basic launcher", "joblib n_jobs=2"
BASIC_START, JOBLIB_START = "basic launcher, start-up", "joblib n_jobs=2, start-up"
WALL, PER_JOB = "sweep_wall_s", "wall_per_job_s"
RATIOS = (
    Ratio("4-job sweep speed-up (wall)", WALL, "s", BASIC, JOBLIB, goal=1.6, speedup=True),
    Ratio(
        "start-up per job, basic / joblib", PER_JOB, "s", BASIC_START, JOBLIB_START, speedup=True
    ),
)
LAUNCHERS = {
    BASIC: [],
    JOBLIB: ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    BASIC_START: [],
    JOBLIB_START: ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
}


def sweep_args(settings: Settings, root: Path, name: str) -> list[str]:
    """The sweep as a user types it; start-up variants fit and test nothing."""
    samples = BATCH_SIZE * 16 * (settings.warmup + settings.steps)
    return [
        "-m",
        *LAUNCHERS[name],
        "model=vae",
        "trainer.max_epochs=1",
        f"data.batch_size={BATCH_SIZE}",
        f"data.train_samples={samples}",
        "data.val_samples=512",
        "data.test_samples=512",
        "trainer.enable_progress_bar=false",
        "logger.experiment_name=bench_parallel_sweep",
        f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
        *(["fit=false", "test=false"] if name in (BASIC_START, JOBLIB_START) else []),
        f"seed={','.join(str(s) for s in range(1, JOBS + 1))}",
    ]


def run_sweep(settings: Settings, root: Path, name: str) -> Measurement:
    """One whole sweep command, timed start to exit (:func:`hpml.bench.startup.timed`); a
    failed sweep fails the case."""
    command = [sys.executable, "-m", "hpml.train", *sweep_args(settings, root, name)]
    wall = startup.timed(command, 0, root)[startup.WALL]
    return {WALL: wall, PER_JOB: wall / JOBS}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    root = (bench_dir / "parallel_sweep").resolve()
    root.mkdir(parents=True, exist_ok=True)
    variants = {name: (lambda n=name: run_sweep(settings, root, n)) for name in LAUNCHERS}
    notes = {
        "jobs": JOBS,
        "model": "vae",
        "batch_size": BATCH_SIZE,
        "cores": os.cpu_count(),
        "commands": {name: sweep_args(settings, root, name) for name in LAUNCHERS},
    }
    return run_case("parallel_sweep", variants, RATIOS, settings, report, notes)
