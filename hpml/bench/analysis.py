"""Cases ``profiler_idle`` and ``analysis_callbacks``: what hpml's analysis costs a training run.

``profile=torch`` with its window beyond the run against ``profile=none``; ``callbacks=analysis``
against the performance monitor alone. Both measured as ``overhead``; goal: at least 0.98.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch

from hpml.bench.harness import CaseResult, Report, Settings, run_case
from hpml.bench.overhead import compose_config, configurations, pair_ratios, run_hpml

# each case's variants, numerator first: extra overrides of the job
PAIRS: dict[str, dict[str, Sequence[str]]] = {
    "profiler_idle": {
        "profiler outside window": ["profile=torch", "profile.skip_first=1000000"],
        "no profiler": ["profile=none"],
    },
    "analysis_callbacks": {
        "all analysis callbacks": ["callbacks=analysis"],
        "perf monitor only": [
            "callbacks=perf",
            "callbacks.perf.count_flops=false",
            "callbacks.perf.measured_peak=false",
        ],
    },
}


def run_pair(
    case: str, settings: Settings, bench_dir: Path, report: Report | None = None
) -> CaseResult:
    """Case ``case`` of :data:`PAIRS`: its two variants, each an ``hpml.train`` job."""
    variants = PAIRS[case]
    root = (bench_dir / "hpml").resolve()
    runs = {
        name: (lambda extra=extra: run_hpml(compose_config(settings, root, extra), settings))
        for name, extra in variants.items()
    }
    notes = {
        "configuration": configurations(torch.device("cpu"))[0].label,
        **{f"overrides {name}": list(extra) for name, extra in variants.items()},
    }
    return run_case(case, runs, pair_ratios(*variants), settings, report, notes)


run_profiler_idle = partial(run_pair, "profiler_idle")
run_analysis_callbacks = partial(run_pair, "analysis_callbacks")
