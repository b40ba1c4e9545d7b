"""The order a sweep's runs ran in, as one sentence of the report's summary.

A sweep's jobs run in the order of their ``hpml.job_num`` tag (Hydra's job number: the order the
sweeper handed them to the launcher). hpml's sweeper (``hydra/sweeper=hpml_basic``, the
default) interleaves repeats: replicate 0 of every config, then replicate 1, and so on, so a
drift of the machine's speed over time spreads over the configs. Sweeps run before that, or with
Hydra's own basic sweeper, ran each config's repeats back to back, and the sentence says so.
Repeats are the report's (:func:`hpml.report.groups.identity`): runs of one config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpml.report.groups import identity

if TYPE_CHECKING:
    from mlflow.entities import Run

INTERLEAVED = "repeats interleaved, one run of every config per round"
BACK_TO_BACK = "each config's repeats back to back, so a drift over time may sit on one config"
IRREGULAR = "repeats neither interleaved nor back to back"
UNREPEATED = "no config repeated"
ONE_CONFIG = "one config, its repeats in turn"


def arrangement(runs: Sequence[Run], by_seed: bool = False) -> str:
    """How the repeats of ``runs`` (one sweep's, in job order) were ordered: one of
    :data:`INTERLEAVED`, :data:`BACK_TO_BACK`, :data:`IRREGULAR`, :data:`UNREPEATED`,
    :data:`ONE_CONFIG`."""
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
        num = run.data.tags.get("hpml.job_num")
        parent = run.data.tags.get("mlflow.parentRunId")
        if num is not None and parent is not None:
            sweeps.setdefault(parent, []).append((int(num), run))
    if not sweeps:
        return None
    said: dict[str, int] = {}
    for jobs in sweeps.values():
        how = arrangement([run for _, run in sorted(jobs, key=lambda job: job[0])], by_seed)
        said[how] = said.get(how, 0) + 1
    lead = "Runs in the order they ran (hpml.job_num)"
    if len(sweeps) == 1:
        return f"{lead}: {next(iter(said))}."
    parts = [f"in {count} sweep{'s' * (count > 1)}, {how}" for how, count in said.items()]
    return f"{lead}, by sweep: {'; '.join(parts)}."
