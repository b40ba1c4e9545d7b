"""Case ``startup``: what a command costs before (and around) its work, against bare imports.

Each variant is a whole process, timed from start to exit on the wall clock and in CPU time
(user + system of the child, from ``getrusage(RUSAGE_CHILDREN)`` before and after: the bench is
single-threaded, so the difference is that child's). A refused config should cost about what
``import torch`` does; a one-step run (start, one step, every end-of-run record, into a store
created before the rounds) about what importing the stack it needs does. A one-job joblib sweep
of the same step says what a sweep job pays on top: its worker imports the stack again. Its CPU
time counts only the worker processes reaped before the sweep exits, so only its wall is a ratio.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case

WALL, CPU = "wall_s", "cpu_s"
TORCH, STACK = "import torch", "import the stack"
HELP, REFUSED = "hpml.train --help", "refused config"
STEP, JOBLIB = "one-step run", "one-step joblib sweep"
STACK_MODULES = "torch, torchvision, lightning.pytorch, mlflow, hydra, omegaconf"
RATIOS = (
    Ratio("refused config (CPU time)", CPU, "CPU-s", REFUSED, TORCH, goal=1.5, at_most=True),
    Ratio("refused config (wall)", WALL, "s", REFUSED, TORCH),
    Ratio("--help (CPU time)", CPU, "CPU-s", HELP, TORCH),
    Ratio("one-step run (wall)", WALL, "s", STEP, STACK, goal=1.2, at_most=True),
    Ratio("one-step run (CPU time)", CPU, "CPU-s", STEP, STACK),
    Ratio("joblib sweep of one job (wall)", WALL, "s", JOBLIB, STEP),
)


def commands(settings: Settings, root: Path) -> dict[str, tuple[list[str], int]]:
    """Each variant's command line and the exit status it must end with."""
    train = [sys.executable, "-m", "hpml.train"]
    step = [
        "trainer.max_steps=1",
        "test=false",
        f"threads={settings.threads}",
        f"logger.tracking_uri=sqlite:///{root / 'mlflow.db'}",
    ]
    return {
        TORCH: ([sys.executable, "-c", "import torch"], 0),
        STACK: ([sys.executable, "-c", f"import {STACK_MODULES}"], 0),
        HELP: ([*train, "--help"], 0),
        REFUSED: ([*train, "data.batch_size=-1"], 1),
        STEP: ([*train, *step], 0),
        JOBLIB: ([*train, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *step], 0),
    }


def timed(command: list[str], status: int, root: Path) -> Measurement:
    """One run of ``command`` in ``root``: wall seconds and the child's CPU seconds. An exit
    status other than ``status`` fails the case, with the last lines the command printed."""
    env = os.environ | {"HPML_ROOT": str(root)}
    env.pop("MLFLOW_TRACKING_URI", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != status:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{command[1:]} exited {done.returncode}, not {status}: {tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {WALL: wall, CPU: cpu}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    """Every variant once untimed (the store is created, the files are in the page cache), then
    ``settings.rounds`` interleaved rounds; ``steps`` and ``warmup`` do not apply. The store and
    the runs' folders live in a temporary folder, removed at the end."""
    bench_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="startup-", dir=bench_dir) as folder:
        root = Path(folder).resolve()
        lines = commands(settings, root)
        variants = {name: (lambda c=c, s=s: timed(c, s, root)) for name, (c, s) in lines.items()}
        for variant in variants.values():
            variant()
        notes = {
            "cores": os.cpu_count(),
            "commands": {name: command[1:] for name, (command, _) in lines.items()},
            "cpu_time": "user + system seconds of the child process and the children it reaped",
        }
        return run_case("startup", variants, RATIOS, settings, report, notes)
