"""The order a sweep's runs ran in (``hpml.job_num``), as one sentence of the report's summary:
hpml's sweeper interleaves repeats (replicate 0 of every config, then 1, ...) so a drift of the
machine's speed spreads over the configs; Hydra's basic sweeper runs them back to back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpml.names import JOB_NUM_TAG
from hpml.report.groups import identity

if TYPE_CHECKING:
    from mlflow.entities import Run

INTERLEAVED = "repeats interleaved, one run of every config per round"
BACK_TO_BACK = "each config's repeats back to back, so a drift over time may sit on one config"
IRREGULAR = "repeats neither interleaved nor back to back"
UNREPEATED = "no config repeated"
ONE_CONFIG = "one config, its repeats in turn"


def arrangement(runs: Sequence[Run], by_seed: bool = False) -> str:
    """How the repeats of ``runs`` (one sweep's, in job order) were ordered: a constant above."""
    configs = [identity(run, by_seed) for run in runs]
    rounds, seen = [], {}
    for config in configs:
        rounds.append(seen.get(config, 0))
        seen[config] = rounds[-1] + 1
    if max(seen.values(), default=0) < 2:
        return UNREPEATED
    if len(seen) == 1:
        return ONE_CONFIG
    if rounds == sorted(rounds):
        return INTERLEAVED
    blocks = sum(index == 0 or configs[index - 1] != config for index, config in enumerate(configs))
    return BACK_TO_BACK if blocks == len(seen) else IRREGULAR


def run_order(runs: Sequence[Run], by_seed: bool = False) -> str | None:
    """``Runs in the order they ran (hpml.job_num): ...`` for the sweep jobs among ``runs``,
    sweep by sweep; None where no run is a sweep's job."""
    sweeps: dict[str, list[tuple[int, Run]]] = {}
    for run in runs:
        num = run.data.tags.get(JOB_NUM_TAG)
        parent = run.data.tags.get("mlflow.parentRunId")
        if num is not None and parent is not None:
            sweeps.setdefault(parent, []).append((int(num), run))
    if not sweeps:
        return None
    said = Counter(
        arrangement([run for _, run in sorted(jobs, key=lambda job: job[0])], by_seed)
        for jobs in sweeps.values()
    )
    lead = "Runs in the order they ran (hpml.job_num)"
    if len(sweeps) == 1:
        return f"{lead}: {next(iter(said))}."
    parts = [f"in {count} sweep{'s' * (count > 1)}, {how}" for how, count in said.items()]
    return f"{lead}, by sweep: {'; '.join(parts)}."
