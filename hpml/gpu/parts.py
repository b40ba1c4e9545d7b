"""The parts of the GPU check, in priority order: each a few real hpml commands, a time budget,
and the rows it adds to the summary (:mod:`hpml.gpu.rows`, :mod:`hpml.gpu.bench_rows`).

Commands are argument lists with ``{python}``, ``{ncu}``, ``{work}`` and ``{gpu_tests}`` (the
test files that hold GPU tests) filled in. The device is lent for 15 minutes, each start
counted, in calls of at most 10: :data:`CALLS` splits the parts into a first call that measures
the network (data placement, hpml against a bare loop, the benches sized for the device, fused
arrays, study 2, what bounds a run) and a second with the counters and the diagnoses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpml.gpu.bench_rows import fused_rows, optimise_rows, overhead_rows, prune_rows, speed_rows
from hpml.gpu.rows import (
    Row,
    Store,
    bound_rows,
    default_rows,
    nvtx_rows,
    nvtx_torch_rows,
    pytest_rows,
)
from hpml.gpu.study_rows import counted_rows, roofline_rows, study2_rows

# what every check run leaves out: checkpoints, the trained model, profiler traces
QUIET = ("trainer.enable_checkpointing=false", "logger.log_model=false")
TRACE_OFF = "profile.trace=false"
FUSED_LRS = ",".join(f"{1e-4 * 1.25**i:.3g}" for i in range(8))  # 8 members, as HFTA's sweeps
VGGS = ("vgg11", "vgg13", "vgg19")  # study 5's networks


@dataclass(frozen=True)
class Part:
    """A part of the check: its commands (argument lists), its budget in seconds, and
    ``rows(store)``: its summary rows, read from the store and the commands' output."""

    name: str
    budget_s: float
    commands: tuple[tuple[str, ...], ...]
    rows: Callable[[Store], list[Row]]


def train(experiment: str, *overrides: str, sweep: bool = False) -> tuple[str, ...]:
    """``python -m hpml.train`` into ``experiment``, quiet; ``-m`` first (Hydra 1.3 refuses
    overrides after it)."""
    flags = ("-m",) if sweep else ()
    name = f"logger.experiment_name={experiment}"
    return ("{python}", "-m", "hpml.train", *flags, name, *QUIET, *overrides)


def py(*args: str) -> tuple[str, ...]:
    return ("{python}", "-m", *args)


def bench(case: str, rounds: int, *flags: str) -> tuple[str, ...]:
    """A bench case, side by side in ``rounds`` rounds (6 or more: a 95% interval)."""
    return py("hpml.bench", "--case", case, "--rounds", str(rounds), *flags)


def counted(model: str) -> tuple[str, ...]:
    """Study 5's step of ``model`` (224 px, batch 16) counted by Nsight Compute into its run."""
    run = train("gpu_counted", "experiment=roofline_vgg", f"model={model}", "trainer=gpu")
    return py("hpml.profile.ncu", "--ncu", "{ncu}", "--", *run[run.index("hpml.train") + 1 :])


def parts() -> list[Part]:
    """The check's parts, highest priority first (a run cut short keeps the first ones); the
    last is a diagnosis, not a path of hpml's: ``profile=torch`` under Nsight Compute."""
    one_epoch = ("trainer=gpu", "trainer.max_epochs=1")
    # epochs of seconds on a GPU: NVML's energy counter moves in steps of a tenth of a second
    energy = ("data.train_samples=8192", "data.val_samples=1024", "data.test_samples=8192")
    default = train("gpu_default", "trainer=gpu,bf16,fp16", *energy, sweep=True)
    # what bounds a run: the default's data through a loader (then its advice, tried), and on
    # the device; the small VGG11-CIFAR in bf16, whose kernels are too short for the host
    loader = train("gpu_loader", *one_epoch, "data.placement=loader", sweep=True)
    advise = py("hpml.advise", "last", "--experiment", "gpu_loader", "--try")
    device = train("gpu_bound", *one_epoch, "data.placement=device")
    host = train("gpu_bound", *one_epoch, "trainer.precision=bf16-mixed", "data.batch_size=64")
    study2 = train(
        "gpu_study2", "experiment=batch_scaling", "trainer=gpu", TRACE_OFF, "test=false", sweep=True
    )
    study5 = train("gpu_study5", "experiment=roofline_vgg", "trainer=gpu", sweep=True)
    # Nsight Compute profiles one kernel inside hpml's forward range and prints its NVTX stack
    ncu_nvtx = (
        "{ncu}",
        *("--nvtx", "--nvtx-include", "regex:hpml.forward/", "--launch-count", "1"),
        *("--metrics", "gpu__time_duration.sum"),
    )
    nvtx = (*ncu_nvtx, *train("gpu_nvtx", *one_epoch, "profile=nvtx", "test=false"))
    # whether torch.profiler's CUDA tracing (CUPTI) runs beside Nsight Compute's
    nvtx_torch = (
        *ncu_nvtx,
        *train("gpu_nvtx_torch", *one_epoch, "profile=torch", TRACE_OFF, "test=false"),
    )
    lrs = f"model.optimizer.lr={FUSED_LRS}"
    fused = train("gpu_fused", "model=vae", "fuse=array", *one_epoch, lrs, sweep=True)
    pytest = ("pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-n", "8", "{gpu_tests}")
    report2 = py("hpml.report", "--last", "--experiment", "gpu_study2", "--out", "{work}/study2")
    report5 = py("hpml.report.roofline", "--experiment", "gpu_study5", "--out", "{work}/study5")
    report_counted = py(
        "hpml.report.roofline", "--experiment", "gpu_counted", "--out", "{work}/counted"
    )
    steps = ("prune=l1_structured", "quant=static_int8", "compile=torch_compile")
    optimise = tuple(train("gpu_optimise", *one_epoch, step) for step in steps)
    return [
        Part("default", 70, (default,), default_rows),
        Part("overhead", 110, (bench("overhead", 6, "--steps", "10"),), overhead_rows),
        Part("speed", 130, (bench("train_speed", 6, "--steps", "10"),), speed_rows),
        Part("prune", 40, (bench("prune", 6),), prune_rows),
        Part("fused", 70, (fused, bench("fuse", 3)), fused_rows),
        Part("bound", 60, (loader, device, host, advise), bound_rows),
        Part("study2", 60, (study2, report2), study2_rows),
        Part("counted", 90, (*(counted(m) for m in VGGS), report_counted), counted_rows),
        Part("nvtx", 30, (nvtx,), nvtx_rows),
        Part("pytest", 80, (py(*pytest),), pytest_rows),
        Part("nvtx_torch", 30, (nvtx_torch,), nvtx_torch_rows),
        # figures in docs/gpu.md already: run with --parts when a lease has time left
        Part("study5", 45, (study5, report5), roofline_rows),
        Part("optimise", 90, optimise, optimise_rows),
    ]


# the two calls a lease of 15 minutes allows (at most 540 s, then 240 s), and their budgets
CALLS = {
    "first": (("default", "overhead", "speed", "prune", "fused", "bound", "study2"), 535.0),
    "second": (("counted", "nvtx", "pytest", "nvtx_torch"), 235.0),
}
