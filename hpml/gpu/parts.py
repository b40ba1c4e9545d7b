"""The parts of the GPU check, in priority order: each a few real hpml commands, a time budget,
and the rows it adds to the summary (:mod:`hpml.gpu.rows`).

Commands are argument lists with ``{python}``, ``{ncu}``, ``{work}`` and ``{gpu_tests}`` (the
test files that hold GPU tests) filled in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpml.gpu.rows import (
    Row,
    Store,
    default_rows,
    fused_rows,
    nvtx_rows,
    nvtx_torch_rows,
    optimise_rows,
    pytest_rows,
    roofline_rows,
    study2_rows,
)

# what every check run leaves out: checkpoints, the trained model, profiler traces
QUIET = ("trainer.enable_checkpointing=false", "logger.log_model=false")
TRACE_OFF = "profile.trace=false"
FUSED_LRS = ",".join(f"{1e-4 * 1.25**i:.3g}" for i in range(8))  # 8 members, as HFTA's sweeps


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


def parts() -> list[Part]:
    """The check's parts, highest priority first (a run cut short keeps the first ones); the
    last is a diagnosis, not a path of hpml's: ``profile=torch`` under Nsight Compute."""
    one_epoch = ("trainer=gpu", "trainer.max_epochs=1")
    # epochs of seconds on a GPU: NVML's energy counter moves in steps of a tenth of a second
    energy = ("data.train_samples=8192", "data.val_samples=1024", "data.test_samples=16384")
    default = train("gpu_default", "trainer=gpu,bf16,fp16", *energy, sweep=True)
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
    bench_fuse = py("hpml.bench", "--case", "fuse", "--rounds", "3")
    # AMP, channels_last and compiled training, side by side in 9 rounds (a 95% interval)
    bench_train = py("hpml.bench", "--case", "train_speed", "--rounds", "9", "--steps", "10")
    pytest = ("pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-n", "8", "{gpu_tests}")
    report2 = py("hpml.report", "--last", "--experiment", "gpu_study2", "--out", "{work}/study2")
    report5 = py("hpml.report.roofline", "--experiment", "gpu_study5", "--out", "{work}/study5")
    return [
        Part("default", 60, (default,), default_rows),
        Part("study2", 110, (study2, report2), study2_rows),
        Part("study5", 60, (study5, report5), roofline_rows),
        Part("nvtx", 30, (nvtx,), nvtx_rows),
        Part("fused", 70, (fused, bench_fuse), fused_rows),
        Part(
            "optimise",
            160,
            (
                train("gpu_optimise", *one_epoch, "prune=l1_structured"),
                train("gpu_optimise", *one_epoch, "quant=static_int8"),
                train("gpu_optimise", *one_epoch, "compile=torch_compile"),
                bench_train,
            ),
            optimise_rows,
        ),
        Part("pytest", 90, (py(*pytest),), pytest_rows),
        Part("nvtx_torch", 30, (nvtx_torch,), nvtx_torch_rows),
    ]
