"""Runs on a slow machine, told by their canaries (:mod:`hpml.callbacks.canary`).

A run's *peers* are the other runs in the stores the report reads that ran in its environment
(:func:`hpml.report.environment.entries`) on its host and timed the same canary plan (tag
``hpml.canary.plan``), whatever their config: the canary's work is fixed. Each of the run's
canary times (each workload, at its start and its end) is divided by the median of its peers'
same time. A workload's slowdown is the smaller of its two ratios (a slow machine is slow at
the run's start and at its end; one slow moment is not), the run's the largest over its
workloads. Over ``1 + threshold`` the run is flagged ``slow machine``; a time with fewer than
:data:`MIN_PEERS` peers carrying it is not judged. The threshold is the run's own (tag
``hpml.canary.slow_above``, its config's ``callbacks.canary.slow_above``) unless the report
is given one (``--slow-machine``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpml.names import (
    CANARY_PLAN_TAG,
    CANARY_POINTS,
    CANARY_THRESHOLD_TAG,
    CANARY_WORKLOADS,
    MS,
    canary,
)
from hpml.report.environment import TAGS, entries

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.report.comparisons import Comparison
    from hpml.report.stores import Stores

SLOW_MACHINE = "slow machine"
MIN_PEERS = 2  # other runs a time is compared with: with fewer than 3 such runs in all, no flag
HOST_TAG = TAGS["env.host"]


@dataclass(frozen=True)
class Slowdown:
    """A run's slowest canary workload against its peers' median: which, its ratio (> 1: slower
    than its peers; the smaller of its start's and end's), over how many peers, the threshold
    it was judged by, and the points of the run judged (start, end)."""

    workload: str
    ratio: float
    peers: int
    threshold: float
    points: tuple[str, ...]

    @property
    def slow(self) -> bool:
        return self.ratio > 1 + self.threshold

    def text(self) -> str:
        """``slow machine: canary cpu_gemm 3.1x the median of 5 other runs at its start and
        end``, or empty for a run that was not slow."""
        if not self.slow:
            return ""
        return (
            f"{SLOW_MACHINE}: canary {self.workload} {self.ratio:.3g}x the median of "
            f"{self.peers} other runs at its {' and '.join(self.points)}"
        )


def times(run: Run) -> dict[tuple[str, str], float]:
    """``(workload, point) -> ms`` of each canary time ``run`` logged."""
    metrics = run.data.metrics
    return {
        (what, when): metrics[name]
        for what in CANARY_WORKLOADS
        for when in CANARY_POINTS
        if (name := canary(what, when, MS)) in metrics
    }


def threshold(run: Run, override: float | None = None) -> float | None:
    """The fraction slower that counts as slow for ``run``: ``override``, else its own tag;
    None where it has neither (a run without the canary)."""
    if override is not None:
        return override
    text = run.data.tags.get(CANARY_THRESHOLD_TAG)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def peer_key(run: Run) -> tuple[frozenset[tuple[str, str]], str, str] | None:
    """What a run's peers share with it: environment, host and canary plan; None without a
    plan (no canary)."""
    plan = run.data.tags.get(CANARY_PLAN_TAG)
    if plan is None:
        return None
    return frozenset(entries(run)), run.data.tags.get(HOST_TAG, ""), plan


def judge(run: Run, peers: Iterable[Run], override: float | None = None) -> Slowdown | None:
    """``run``'s :class:`Slowdown` against ``peers`` (``run`` itself among them is skipped);
    None where no time of it has :data:`MIN_PEERS` peers' to compare with."""
    limit, mine = threshold(run, override), times(run)
    if limit is None or not mine:
        return None
    others = [times(p) for p in peers if p.info.run_id != run.info.run_id]
    ratios: dict[str, dict[str, tuple[float, int]]] = {}
    for (what, when), ms in mine.items():
        values = [found[(what, when)] for found in others if (what, when) in found]
        if len(values) >= MIN_PEERS:
            ratios.setdefault(what, {})[when] = (ms / statistics.median(values), len(values))
    judged = []
    for what, at in ratios.items():  # slower only as far as it is at every point timed
        slowest = min(ratio for ratio, _ in at.values())
        judged.append(Slowdown(what, slowest, min(n for _, n in at.values()), limit, tuple(at)))
    return max(judged, key=lambda s: s.ratio, default=None)


def _quoted(text: str) -> str:
    """``text`` as a filter string's value (MLflow's have no escapes: the other quote)."""
    return f'"{text}"' if "'" in text else f"'{text}'"


def peers(stores: Stores, runs: Sequence[Run]) -> dict[tuple, list[Run]]:
    """Every run in ``stores`` of each environment, host and plan among ``runs`` (one search
    per host and plan, in every experiment), by :func:`peer_key`; ``runs`` themselves too."""
    keyed = {key: run for run in runs if (key := peer_key(run)) is not None}
    found: dict[tuple, dict[str, Run]] = {key: {} for key in keyed}
    for host, plan in dict.fromkeys((key[1], key[2]) for key in keyed):
        query = f"tags.`{CANARY_PLAN_TAG}` = {_quoted(plan)}"
        if host:
            query += f" and tags.`{HOST_TAG}` = {_quoted(host)}"
        for run in [*stores.search(query), *runs]:
            key = peer_key(run)
            if key in found:
                found[key].setdefault(run.info.run_id, run)
    return {key: list(members.values()) for key, members in found.items()}


def slowdowns(
    stores: Stores, runs: Sequence[Run], override: float | None = None
) -> dict[str, Slowdown]:
    """Each judged run's :class:`Slowdown`, by run id."""
    grouped = peers(stores, runs)
    found = {}
    for run in runs:
        key = peer_key(run)
        if key is not None and (judged := judge(run, grouped[key], override)) is not None:
            found[run.info.run_id] = judged
    return found


def header_line(names: dict[str, str], found: dict[str, Slowdown]) -> str:
    """The header's ``machine`` line: the runs flagged (by ``names``: run id -> its name in the
    report), or that none of those judged was."""
    if not found:
        return ""
    slow = [(run_id, s) for run_id, s in found.items() if s.slow]
    limits = sorted({s.threshold for s in found.values()})
    rule = (
        f"canary slower than the median of the other runs of its environment and host by more "
        f"than {' or '.join(f'{limit:.0%}' for limit in limits)}"
    )
    if not slow:
        return f"no run on a {SLOW_MACHINE} ({len(found)} runs judged: {rule})"
    listed = ", ".join(f"{names[run_id]} ({s.workload} {s.ratio:.3g}x)" for run_id, s in slow)
    return f"{len(slow)} of {len(found)} runs judged on a {SLOW_MACHINE} ({rule}): {listed}"


def sides_differ(mine: Sequence[Run], theirs: Sequence[Run], override: float | None) -> str:
    """A note where the two sides of a comparison (``theirs`` the reference) timed their
    canaries apart beyond the threshold, at every point both timed (as :func:`judge` asks of a
    run): ``canaries differ: cpu_gemm 1.62x slower than the reference's at the start and end
    (medians of 3 and 3 runs, threshold 25%)``; empty where they agree or a side has none. The
    reference's threshold, unless ``override``."""
    limit = next((t for run in theirs if (t := threshold(run, override)) is not None), None)
    if limit is None:
        return ""
    ours, others = [times(run) for run in mine], [times(run) for run in theirs]
    worst: tuple[float, str, tuple[str, ...], int, int] | None = None
    for what in CANARY_WORKLOADS:
        found = {}
        for when in CANARY_POINTS:
            a = [t[(what, when)] for t in ours if (what, when) in t]
            b = [t[(what, when)] for t in others if (what, when) in t]
            if a and b:
                found[when] = (statistics.median(a) / statistics.median(b), len(a), len(b))
        if not found:
            continue
        ratio, n_mine, n_theirs = min(found.values(), key=lambda f: _apart(f[0]))
        if worst is None or _apart(ratio) > _apart(worst[0]):
            worst = (ratio, what, tuple(found), n_mine, n_theirs)
    if worst is None or _apart(worst[0]) <= 1 + limit:
        return ""
    ratio, what, points, n_mine, n_theirs = worst
    how = f"{ratio:.3g}x slower" if ratio > 1 else f"{1 / ratio:.3g}x faster"
    return (
        f"canaries differ: {what} {how} than the reference's at the {' and '.join(points)} "
        f"(medians of {n_mine} and {n_theirs} runs, threshold {limit:.0%}): the sides ran on "
        "machines of different speed"
    )


def _apart(ratio: float) -> float:
    """How far apart a ratio says two times are, either way: 2.0 for 2x and for 0.5x."""
    return max(ratio, 1 / ratio)


def noted(
    found: list[Comparison], mine: Sequence[Run], theirs: Sequence[Run], override: float | None
) -> list[Comparison]:
    """``found``, the comparisons of ``mine`` against the reference ``theirs``, each with the
    note :func:`sides_differ` makes (their verdicts as they were)."""
    note = sides_differ(mine, theirs, override)
    return [dataclasses.replace(c, note=note) for c in found] if note else found
