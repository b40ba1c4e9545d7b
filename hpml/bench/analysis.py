"""Cases ``profiler_idle`` and ``analysis_callbacks``: what hpml's analysis costs a training run.

``profiler_idle``: ``profile=torch`` with its window beyond the run (its step regions and the
profiler's scheduling still run every step) against ``profile=none``. ``analysis_callbacks``:
``callbacks=analysis`` (model stats, FLOPs and MFU, memory breakdown, roofline) against the
performance monitor alone, FLOP counting off. Both measure with the same monitor over the same
window (once-per-run work falls in warm-up or before it); goal: at least 0.98.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpml.bench.harness import CaseResult, Ratio, Report, Settings, run_case
from hpml.bench.overhead import BATCH_SIZE, CPU_THROUGHPUT, THROUGHPUT, compose_config, run_hpml


def _ratios(numerator: str, denominator: str) -> tuple[Ratio, ...]:
    return (
        Ratio("throughput (wall)", THROUGHPUT, "samples/s", numerator, denominator, 0.98),
        Ratio(
            "throughput (CPU time)", CPU_THROUGHPUT, "samples/CPU-s", numerator, denominator, 0.98
        ),
    )


def _pair(
    case: str,
    settings: Settings,
    bench_dir: Path,
    report: Report | None,
    variants: dict[str, Sequence[str]],
) -> CaseResult:
    root = (bench_dir / "hpml").resolve()
    runs = {
        name: (lambda extra=extra: run_hpml(compose_config(settings, root, extra), settings))
        for name, extra in variants.items()
    }
    names = list(variants)
    notes = {
        "batch_size": BATCH_SIZE,
        "model": "vgg11 (cifar layout)",
        **{f"overrides {name}": list(extra) for name, extra in variants.items()},
    }
    return run_case(case, runs, _ratios(names[0], names[1]), settings, report, notes)


def run_profiler_idle(
    settings: Settings, bench_dir: Path, report: Report | None = None
) -> CaseResult:
    return _pair(
        "profiler_idle",
        settings,
        bench_dir,
        report,
        {
            "profiler outside window": ["profile=torch", "profile.skip_first=1000000"],
            "no profiler": ["profile=none"],
        },
    )


def run_analysis_callbacks(
    settings: Settings, bench_dir: Path, report: Report | None = None
) -> CaseResult:
    return _pair(
        "analysis_callbacks",
        settings,
        bench_dir,
        report,
        {
            "all analysis callbacks": ["callbacks=analysis"],
            "perf monitor only": [
                "callbacks=perf",
                "callbacks.perf.count_flops=false",
                "callbacks.perf.measured_peak=false",
            ],
        },
    )
