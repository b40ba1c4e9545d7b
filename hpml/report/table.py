"""The runs of a report as rows: the config keys that differ between them, and their metrics."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpml import names
from hpml.names import (
    EPOCH_TIME,
    MFU_MEASURED,
    MODEL_FWD_FLOPS,
    PEAK_MEMORY,
    STEP_TIME,
    TEST_ACC,
    TEST_LOSS,
    THROUGHPUT,
    VAL_ACC,
    VAL_LOSS,
    bound_tag,
)
from hpml.report.environment import differing as differing_env
from hpml.report.environment import env_value, is_env

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.report.machine import Slowdown

# the columns a runs table shows when the runs carry them, in this order; then any
# before/after measurement (prune, quant, compile) of size and latency
HEADLINE = (
    VAL_LOSS,
    VAL_ACC,
    TEST_LOSS,
    TEST_ACC,
    THROUGHPUT,
    STEP_TIME,
    EPOCH_TIME,
    PEAK_MEMORY,
    MODEL_FWD_FLOPS,
    MFU_MEASURED,
)
MEASURED = ("size_bytes", "latency_b1_ms")
# params that differ between any two runs of a sweep and say nothing of its configs (an
# Optuna trial's number is its job's, for the pruning callback to find it)
BOOKKEEPING = ("paths.", "hydra.", "logger.", "resume", "callbacks.optuna_pruning.trial")


@dataclass(frozen=True)
class Row:
    """One run: its name, id and status, its values of the differing keys, its metrics; where
    its canary was judged (:mod:`hpml.report.machine`), its slowdown against its peers and the
    flag (``slow machine: ...``, empty for a run that was not slow)."""

    name: str
    run_id: str
    status: str
    error: str | None
    keys: dict[str, str]
    metrics: dict[str, float]
    slowdown: float | None = None
    machine: str = ""


def flagged(row: Row, slowdown: Slowdown | None) -> Row:
    """``row`` with its canary's judgement, if it has one."""
    if slowdown is None:
        return row
    return dataclasses.replace(row, slowdown=slowdown.ratio, machine=slowdown.text())


BOUND, BOUND_COLUMN = bound_tag("train"), "bound (train)"  # what bounded a run's training


def value(run: Run, key: str) -> str:
    """A run's value of config key ``key``, its option of config group ``key``, or of
    environment key ``key`` (``env.device``, ...: :mod:`hpml.report.environment`)."""
    if is_env(key):
        return env_value(run, key)
    return run.data.params.get(key, run.data.tags.get(f"{names.CHOICE_TAG}{key}", ""))


def differing_keys(runs: list[Run]) -> list[str]:
    """What differs between the runs: the config groups whose option differs, the config keys
    that differ other than through those options, then where the runs ran."""
    tags = {key for run in runs for key in run.data.tags if key.startswith(names.CHOICE_TAG)}
    groups = sorted(
        tag.removeprefix(names.CHOICE_TAG)
        for tag in tags
        if len({run.data.tags.get(tag) for run in runs}) > 1
    )
    keys = sorted({key for run in runs for key in run.data.params})
    differing = []
    for key in keys:
        values = [run.data.params.get(key) for run in runs]
        if key.startswith(BOOKKEEPING) or len(set(values)) == 1:
            continue
        folders = [run.data.tags.get(names.OUTPUT_DIR_TAG) for run in runs]
        if all(f and v and f in v for f, v in zip(folders, values, strict=True)):
            continue  # each job's own folder (checkpoints, trainer root): not a config choice
        group = next((g for g in groups if key.startswith(f"{g}.")), None)
        if group is not None and not _varies_within(runs, group, key):
            continue  # it changes with the group's option, which has its own column
        differing.append(key)
    return groups + differing + differing_env(runs)


def _varies_within(runs: list[Run], group: str, key: str) -> bool:
    """Whether ``key`` takes several values among runs of one option of ``group``."""
    seen: dict[str, set[str | None]] = {}
    for run in runs:
        seen.setdefault(value(run, group), set()).add(run.data.params.get(key))
    return any(len(values) > 1 for values in seen.values())


def metric_columns(runs: list[Run]) -> list[str]:
    """The :data:`HEADLINE` metrics any run carries, then its before/after measurements."""
    present = {name for run in runs for name in run.data.metrics}
    columns = [name for name in HEADLINE if name in present]
    measured = sorted(
        name
        for name in present
        if name.split("/", 1)[0].endswith(("_before", "_after")) and name.endswith(MEASURED)
    )
    return columns + measured


def rows(runs: list[Run]) -> tuple[list[str], list[str], list[Row]]:
    """``(differing keys, metric columns, one row per run)``; a column of what bounded each
    run's training (``hpml.bound.train``) where any run says."""
    keys, columns = differing_keys(runs), metric_columns(runs)
    bounded = any(BOUND in run.data.tags for run in runs)
    return (
        [*keys, BOUND_COLUMN] if bounded else keys,
        columns,
        [
            Row(
                name=short_name(run),
                run_id=run.info.run_id,
                status=run.info.status,
                error=run.data.tags.get(names.ERROR_TAG),
                keys={key: value(run, key) for key in keys}
                | ({BOUND_COLUMN: run.data.tags.get(BOUND, "")} if bounded else {}),
                metrics={c: run.data.metrics[c] for c in columns if c in run.data.metrics},
            )
            for run in runs
        ],
    )


def short_name(run: Run) -> str:
    """``job 3`` for a job of a sweep, else the run's name less its overrides (``vgg11/cifar10``
    of ``vgg11/cifar10 [prune=fpgm,...]``: the key columns say those)."""
    if (job := run.data.tags.get(names.JOB_NUM_TAG)) is not None:
        return f"job {job}"
    return str(run.info.run_name or run.info.run_id).split(" [", 1)[0]


def number(value: float | None) -> str:
    """A table cell: 4 significant digits, thousands grouped for large counts; empty for None."""
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 1e4 and float(value).is_integer() else f"{value:.4g}"
