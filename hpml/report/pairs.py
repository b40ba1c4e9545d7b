"""Runs compared by one key (``--by KEY``: a param, a config group or an environment key), and a
sweep against an earlier sweep of the same configs (``--baseline``).

Runs equal but for KEY are *paired*: per config, one group of repeats per value of KEY, the
first value (numeric order where every value is a number; the baseline sweep for
``--baseline``) the reference, which every other value is compared with
(:func:`hpml.report.groups.versus`). :func:`table` leads the report, benchstat's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpml.errors import HpmlError
from hpml.names import choice_tag, label
from hpml.report.comparisons import COLUMNS, Comparison
from hpml.report.environment import STORE, TAGS, is_env
from hpml.report.groups import FINISHED, Group, identity, label_keys, versus
from hpml.report.machine import noted
from hpml.report.studies import Table
from hpml.report.studies.cells import GROUP_VERDICT
from hpml.report.table import number, value

if TYPE_CHECKING:
    from mlflow.entities import Run

SWEEP = "sweep"  # the key --baseline compares by: which of the two sweeps a run belongs to
BASELINE, NEW = "baseline", "new"
Side = Callable[["Run"], str]  # a run's value of the key it is compared by


@dataclass(frozen=True)
class Pair:
    """One config's groups, one per value of the key (the reference first), and the
    comparison of each other value with the reference."""

    config: str
    sides: dict[str, Group]
    against: dict[str, list[Comparison]]  # each other value's comparisons with the reference

    @property
    def reference(self) -> str:
        return next(iter(self.sides))

    @property
    def comparisons(self) -> list[Comparison]:
        return [c for found in self.against.values() for c in found]


@dataclass(frozen=True)
class Compared:
    """What the report compares by: the key, its pairs, the configs with one value only, and
    the title of its table."""

    key: str
    pairs: list[Pair]
    alone: list[str]
    title: str

    @property
    def comparisons(self) -> list[Comparison]:
        return [c for pair in self.pairs for c in pair.comparisons]


def by_key(
    runs: list[Run],
    key: str,
    by_seed: bool = False,
    margin: float = 0.0,
    slow_above: float | None = None,
) -> Compared:
    """``runs`` compared by ``key`` (``--by``); ``margin``: ``--threshold``; ``slow_above``:
    ``--slow-machine``."""
    if not any(value(run, key) for run in runs):
        raise HpmlError(
            f"--by {key}: no run has it (a param such as data.batch_size, a config group, or "
            f"one of {', '.join(TAGS)}, {STORE})"
        )
    pairs, alone = paired(runs, key, by_seed=by_seed, margin=margin, slow_above=slow_above)
    return Compared(key, pairs, alone, f"Compared by {key}")


def by_sweep(
    runs: list[Run],
    new: Run,
    old: Run,
    by_seed: bool = False,
    margin: float = 0.0,
    slow_above: float | None = None,
) -> Compared:
    """The jobs of sweep ``new`` against those of the earlier sweep ``old`` among ``runs``
    (``--sweep NEW --baseline OLD``): paired by config whatever their environment."""
    parent = old.info.run_id

    def side(run: Run) -> str:
        return BASELINE if run.data.tags.get("mlflow.parentRunId") == parent else NEW

    pairs, alone = paired(runs, SWEEP, side, by_seed, True, BASELINE, margin, slow_above)
    return Compared(SWEEP, pairs, alone, f"Sweep {new.info.run_id} against baseline sweep {parent}")


def _names_key(name: str, key: str, any_env: bool = False) -> bool:
    """Whether identity entry ``name`` is ``key`` (the param, the config group's option and
    params, or the environment key), or any environment key where ``any_env``."""
    named = name in (key, choice_tag(key)) or name.startswith(f"{key}.")
    return named or (any_env and is_env(name))


def _order(values: list[str]) -> list[str]:
    try:
        return sorted(values, key=float)
    except ValueError:
        return values


def paired(
    runs: list[Run],
    key: str,
    side: Side | None = None,
    by_seed: bool = False,
    any_env: bool = False,
    reference: str | None = None,
    margin: float = 0.0,
    slow_above: float | None = None,
) -> tuple[list[Pair], list[str]]:
    """The finished ``runs`` paired by ``key``, and the configs found with one value of it only.

    Args:
        side: a run's value of ``key`` (default: :func:`~hpml.report.table.value`).
        any_env: pair runs whatever their environment (two sweeps on other commits).
        reference: the value the others are compared with (default: the first).
        margin: the smallest difference a verdict calls faster or slower.
        slow_above: the canary threshold (default: the runs' own): beyond it, a comparison
            notes that its sides' canaries differ (:func:`hpml.report.machine.noted`).
    """
    side = side or (lambda run: value(run, key))
    keys = [k for k in label_keys(runs, by_seed) if not _names_key(k, key, any_env)]
    configs: dict[frozenset, dict[str, list[Run]]] = {}
    for run in runs:
        if run.info.status == FINISHED:  # by its identity but the key (and the environment)
            rest = frozenset(
                e for e in identity(run, by_seed) if not _names_key(e[0], key, any_env)
            )
            configs.setdefault(rest, {}).setdefault(side(run), []).append(run)
    values = _order(list(dict.fromkeys(side(r) for r in runs if r.info.status == FINISHED)))
    values.sort(key=lambda v: v != reference)  # stable: the reference first, if any
    pairs, alone = [], []
    for found in configs.values():
        first = next(iter(found.values()))[0]
        config = ", ".join(f"{k}={value(first, k)}" for k in keys) or "all runs"
        if len(found) < 2:
            alone.append(config)
            continue
        sides = {v: Group(f"{config}, {key}={v}", tuple(found[v])) for v in values if v in found}
        reference, *others = sides
        against = {
            other: noted(
                versus(
                    sides[other],
                    sides[reference],
                    f"{config}: {key}={other} vs {key}={reference}",
                    margin,
                    feeds_input=key == "data" or key.startswith("data."),
                ),
                sides[other].runs,
                sides[reference].runs,
                slow_above,
            )
            for other in others
        }
        pairs.append(Pair(config, sides, against))
    pairs.sort(
        key=lambda pair: min(r.info.start_time or 0 for g in pair.sides.values() for r in g.runs)
    )
    return pairs, alone


def table(pairs: list[Pair], key: str, alone: list[str], title: str) -> Table | None:
    """The comparison table, benchstat's shape: a row per config, measure and value compared
    with the reference; the values' medians, the ratio with its interval, n and the verdict."""
    if not pairs:
        return None
    values = list(dict.fromkeys(v for pair in pairs for v in pair.sides))
    rows, data = [], []
    for pair in pairs:
        for other, found in pair.against.items():
            for c in found:
                medians = {pair.reference: c.before, other: c.after}
                cells = [medians.get(v) for v in values]
                rows.append([pair.config, label(c.measure), *(number(m) for m in cells), c.cell()])
                data.append([pair.config, c.measure, *cells, *c.row()[5:]])
    unpaired = (
        f" Configs with one value of {key} only, not compared: {'; '.join(alone)}." if alone else ""
    )
    return Table(
        title,
        f"Runs equal but for {key}, paired per config; each value of {key} against "
        f"{key}={values[0]} (a column per value: the median of its repeats). Ratio: the "
        f"throughput of one over the reference's, or the reference's step time or latency over "
        f"its (> 1: faster than the reference), {GROUP_VERDICT.format(why='')}{unpaired}",
        ["config", "measure", *(f"{key}={v} (median)" for v in values), "ratio [95% interval]"],
        rows,
        name=f"by_{key}",
        data=(["config", "measure", *values, *COLUMNS[5:]], data),
    )
