"""Fused training arrays (HFTA) beside their serial twins: every member's quality and samples/s
against its *serial twin*, the finished unfused run whose config equals the member's but for
``fuse.*`` and bookkeeping (:data:`~hpml.report.table.BOOKKEEPING`, own folders taken out).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean, harmonic_mean
from typing import TYPE_CHECKING

from hpml.analysis.stats import ratio_ci, verdict
from hpml.names import (
    ARRAY_SIZE_TAG,
    ARRAY_TAG,
    FUSED_TAG,
    MEMBER_TAG,
    THROUGHPUT,
    VAL_ACC,
    VAL_LOSS,
    label,
)
from hpml.report.canvas import Canvas, Figure
from hpml.report.comparisons import Comparison, noisy
from hpml.report.groups import params_but
from hpml.report.studies import Table, columns
from hpml.report.table import BOOKKEEPING, differing_keys, number, short_name, value

if TYPE_CHECKING:
    from mlflow.entities import Run

NOT_CONFIG = (*BOOKKEEPING, "fuse.")


def members(runs: Sequence[Run]) -> list[Run]:
    """The fused members among ``runs``, by array, then member index."""
    fused = [r for r in runs if r.data.tags.get(FUSED_TAG) == "true"]
    return sorted(
        fused, key=lambda r: (r.data.tags.get(ARRAY_TAG, ""), int(r.data.tags.get(MEMBER_TAG, 0)))
    )


def config(run: Run) -> frozenset[tuple[str, str]]:
    """What a twin must share with a member: the params other than :data:`NOT_CONFIG`."""
    return params_but(run, lambda key: key.startswith(NOT_CONFIG))


def twins(fused: Sequence[Run], candidates: Sequence[Run]) -> dict[str, Run]:
    """Each member's serial twin among ``candidates`` (the newest where several match), by the
    member's run id."""
    serial = [
        r
        for r in candidates
        if r.data.tags.get(FUSED_TAG) != "true" and r.info.status == "FINISHED"
    ]
    by_config = {config(r): r for r in sorted(serial, key=lambda r: r.info.start_time or 0)}
    return {m.info.run_id: twin for m in fused if (twin := by_config.get(config(m))) is not None}


def _size(run: Run) -> int:
    return int(run.data.tags[ARRAY_SIZE_TAG])


def _quality(fused: Sequence[Run]) -> list[str]:
    """val/loss, the metric the sweep optimised, val/acc: those the members logged."""
    names = [VAL_LOSS, *(r.data.params.get("optimized_metric", VAL_LOSS) for r in fused), VAL_ACC]
    return [n for n in dict.fromkeys(names) if any(n in r.data.metrics for r in fused)]


def _speedup(run: Run, twin: Run | None, total: float | None, twin_speed: float | None) -> str:
    """The array's total over its twin's samples/s with its verdict (one run a side: n=1)."""
    if total is None or not twin_speed or twin is None:
        return ""
    interval = ratio_ci([total], [twin_speed])
    return Comparison(
        f"{run.info.run_id} {twin.info.run_id}",
        "fused array vs serial twin",
        THROUGHPUT,
        twin_speed,
        total,
        interval.median,
        None,
        None,
        interval.n,
        verdict(interval, noisy(run) or noisy(twin)),
    ).cell()


def table(runs: Sequence[Run], candidates: Sequence[Run] = ()) -> Table | None:
    """A row per fused member of ``runs``: its swept values, quality and samples/s, and its
    serial twin's (found among ``runs`` and ``candidates``) with the difference and speed-up."""
    fused = members(runs)
    if not fused:
        return None
    found = twins(fused, [*runs, *candidates])
    keys = differing_keys(fused)
    quality = _quality(fused)
    rows = []
    for run in fused:
        m, tags = run.data.metrics, run.data.tags
        speed = m.get(THROUGHPUT)
        total = None if speed is None else _size(run) * speed
        twin = found.get(run.info.run_id)
        t = {} if twin is None else twin.data.metrics
        twin_speed = t.get(THROUGHPUT)
        rows.append(
            [
                ("run", short_name(run)),
                ("status", run.info.status),
                ("array (leader's job folder)", Path(tags.get(ARRAY_TAG, "")).name),
                ("member", tags.get(MEMBER_TAG, "")),
                *((k, value(run, k)) for k in keys),
                *((name, number(m.get(name))) for name in quality),
                ("samples/s per member", number(speed)),
                ("array size (members)", str(_size(run))),
                ("array total (samples/s)", number(total)),
                (
                    "serial twin",
                    "" if twin is None else f"{short_name(twin)} ({twin.info.run_id[:8]})",
                ),
                (f"twin {VAL_LOSS}", number(t.get(VAL_LOSS))),
                (
                    f"{VAL_LOSS} difference (fused - twin)",
                    number(m[VAL_LOSS] - t[VAL_LOSS] if VAL_LOSS in m and VAL_LOSS in t else None),
                ),
                ("twin (samples/s)", number(twin_speed)),
                ("speed-up (x, array total / twin)", _speedup(run, twin, total, twin_speed)),
            ]
        )
    return Table(
        "Fused arrays vs their serial twins (HFTA)",
        "A row per member of a fused array. samples/s: training samples per second of wall "
        "time (train/throughput_samples_per_s); a member's counts its own samples, and every "
        "member goes through every step, so the array's total is array size x a member's. "
        "Serial twin: the finished "
        "run, not fused, whose config equals the member's but for fuse.* and its own paths "
        f"(looked for among the report's runs and those --twin names; {len(found)} of "
        f"{len(fused)} found). Difference: member's val/loss - twin's. Speed-up: the array's "
        "total samples/s / the twin's samples/s, i.e. how much longer training the array's "
        "jobs one by one at the twin's speed takes than the array (> 1: the array is faster), "
        "with its verdict: one run a side has no interval, so it reads within noise until "
        "both sweeps are repeated (replicate=0,1,2).",
        *columns(rows),
    )


def speeds(runs: Sequence[Run], candidates: Sequence[Run] = ()) -> Figure | None:
    """Bars of samples/s per array size: the arrays' totals against their members' twins
    trained one by one; drawn where some member has a twin."""
    fused = [r for r in members(runs) if THROUGHPUT in r.data.metrics]
    found = twins(fused, [*runs, *candidates])
    arrays: dict[str, list[Run]] = defaultdict(list)
    for run in fused:
        arrays[run.data.tags.get(ARRAY_TAG, "")].append(run)
    by_size: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for group in arrays.values():
        size = _size(group[0])
        totals, serial = by_size[size]
        totals.append(size * fmean(r.data.metrics[THROUGHPUT] for r in group))
        for run in group:
            twin = found.get(run.info.run_id)
            if twin is not None and twin.data.metrics.get(THROUGHPUT):
                serial.append(twin.data.metrics[THROUGHPUT])
    by_size = {n: (t, s) for n, (t, s) in by_size.items() if s}
    if not by_size:
        return None
    canvas = Canvas()
    ax = canvas.axes[0]
    for x, (size, (totals, serial)) in enumerate(sorted(by_size.items())):
        fused_bar = ax.bar(x - 0.2, fmean(totals), 0.4, color="C0", label="fused array (total)")
        serial_bar = ax.bar(x + 0.2, harmonic_mean(serial), 0.4, color="C1", label="serial twins")
        canvas.tip(
            fused_bar[0],
            f"{size} members: {len(totals)} arrays, {fmean(totals):.4g} samples/s in total",
        )
        canvas.tip(
            serial_bar[0],
            f"{len(serial)} serial twins, one by one: {harmonic_mean(serial):.4g} samples/s",
        )
    handles, names = ax.get_legend_handles_labels()
    canvas.legend(ax, handles[:2], names[:2], frameon=True)
    ax.set_xticks(range(len(by_size)), [f"{n} members" for n in sorted(by_size)])
    ax.set_xlim(-0.8, len(by_size) - 0.2)  # one array size: bars of the same width as for more
    ax.set_xlabel("array size")
    ax.set_ylabel(label(THROUGHPUT))
    ax.grid(alpha=0.3, axis="y")
    return Figure(
        "Fused arrays vs serial twins: samples/s",
        "Training samples per second per array size. Fused: the array's total (array size x a "
        "member's samples/s), the mean over arrays of that size. Serial: the twins' samples/s "
        "trained one after another (their harmonic mean: total samples over total time).",
        canvas.svg(),
    )
