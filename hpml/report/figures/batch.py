"""Figures against batch size: throughput and step time, and where a profiled step's time went."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from hpml.analysis.profile_summary import CATEGORIES
from hpml.names import PCT, STEP_TIME, THROUGHPUT, metric
from hpml.report.canvas import Canvas, Figure, fit, run_label, ticks_at
from hpml.report.series import REPEATS, legend_above, param_value, series_name, series_panels

if TYPE_CHECKING:
    from mlflow.entities import Run


def batch_scaling(runs: list[Run], keys: list[str]) -> Figure | None:
    """Throughput and step time against batch size, a line per other config."""
    key, speed, step = "data.batch_size", THROUGHPUT, STEP_TIME
    measured = [r for r in runs if param_value(r, key) is not None and speed in r.data.metrics]
    if key not in keys or len(measured) < 2:
        return None
    canvas = series_panels(
        measured,
        keys,
        lambda r: param_value(r, key) or 0,
        lambda r: series_name(r, keys, key),
        (speed, step),
    )
    for ax in canvas.axes:
        ticks_at(ax, [param_value(r, key) or 0 for r in measured])
        ax.set_xlabel("batch size (samples)")
    legend_above(canvas, canvas.axes[0])
    return Figure(
        "Throughput and step time vs batch size",
        "Training samples per second (median over the timed steps) and median step time (ms) "
        "at each batch size, a line per value of the other swept keys; a log axis where values "
        "span more than 10x." + REPEATS,
        canvas.svg(),
    )


def time_shares(runs: list[Run], keys: list[str]) -> Figure | None:
    """Where a profiled training step's time went, by category, against batch size: stacked
    bars, a panel per other config."""
    key = "data.batch_size"
    names = {c: metric("profile", c, PCT) for c in CATEGORIES}
    profiled = [
        r
        for r in runs
        if param_value(r, key) is not None and any(n in r.data.metrics for n in names.values())
    ]
    if key not in keys or len({param_value(r, key) for r in profiled}) < 2:
        return None
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in profiled:
        groups[series_name(run, keys, key)].append(run)
    shown = [c for c, n in names.items() if any(n in r.data.metrics for r in profiled)]
    canvas = Canvas(panels=len(groups))
    for ax, (group, members) in zip(canvas.axes, sorted(groups.items()), strict=True):
        members.sort(key=lambda r: param_value(r, key) or 0)
        bottoms = [0.0] * len(members)
        for index, category in enumerate(shown):
            heights = [r.data.metrics.get(names[category], 0.0) for r in members]
            bars = ax.bar(
                range(len(members)),
                heights,
                bottom=bottoms,
                color=f"C{index}",
                label=category.replace("_", " "),
            )
            for run, bar, share in zip(members, bars, heights, strict=True):
                canvas.tip(bar, f"{run_label(run, keys)}\n{category}: {share:.1f} % of the step")
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        ax.set_xticks(range(len(members)), [f"{param_value(r, key):g}" for r in members])
        ax.set_xlabel("batch size (samples)")
        ax.set_ylabel("share of the profiled steps' time (%)")
        ax.set_ylim(0, 100)
        ax.set_title(fit(group, 60), fontsize=9)
    canvas.legend(canvas.axes[-1], loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return Figure(
        "Time share by category vs batch size",
        "Each instant of the profiled training steps goes to the highest-priority activity "
        "running then (CUDA: kernel > memcpy > memset > runtime > data loading > CPU exec; "
        "CPU: data loading > operator compute > framework overhead), so the shares sum to "
        "100 %.",
        canvas.svg(),
    )
