"""The report's view of a search: the swept keys against the optimised metric (parallel
coordinates) and, for an Optuna study, how much each parameter mattered."""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from hpml.names import step_tag
from hpml.report.canvas import Canvas, Figure, run_label
from hpml.report.table import value

if TYPE_CHECKING:
    from mlflow.entities import Run

IMPORTANCE_TAG = step_tag("optuna", "importance.")  # the sweeper's tags on the search's parent run


def axis_heights(values: list[str]) -> tuple[list[float], list[tuple[float, str]]]:
    """Each value's height in [0, 1] on its axis, and the axis' tick labels: numbers linear (log
    where positive and spanning 100x), else categories evenly in sorted order."""
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        levels = sorted(set(values))
        step = 1 / max(len(levels) - 1, 1)
        return [levels.index(v) * step for v in values], [
            (i * step, v) for i, v in enumerate(levels)
        ]
    lo, hi = min(numbers), max(numbers)
    scale = math.log10 if lo > 0 and hi >= 100 * lo else (lambda x: x)
    span = (scale(hi) - scale(lo)) or 1.0
    heights = [(scale(x) - scale(lo)) / span for x in numbers]
    ticks = [(h, f"{x:.3g}") for h, x in sorted(set(zip(heights, numbers, strict=True)))]
    return heights, spaced(ticks)


def spaced(ticks: list[tuple[float, str]], gap: float = 0.06) -> list[tuple[float, str]]:
    """Ticks at least ``gap`` of the axis apart, so no two labels overlap (a 7 pt label is
    about 4% of the figure's axis); the lowest and the highest are always kept."""
    kept = ticks[:1]
    for tick in ticks[1:]:
        if tick[0] - kept[-1][0] >= gap:
            kept.append(tick)
        elif tick is ticks[-1] and len(kept) > 1:
            kept[-1] = tick  # the highest in place of its close neighbour below
    return kept


def parallel_coordinates(runs: list[Run], keys: list[str]) -> Figure | None:
    """A line per run across an axis per swept key and one for ``optimized_metric``, coloured by
    it: which settings the good runs share."""
    names = Counter(r.data.params.get("optimized_metric") for r in runs)
    name = names.most_common(1)[0][0] if names else None
    scored = [r for r in runs if name and math.isfinite(r.data.metrics.get(name, math.nan))]
    if not keys or len(scored) < 3:
        return None
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    axes = [*keys, name]
    columns = [axis_heights([value(r, k) for r in scored]) for k in keys]
    metric = [r.data.metrics[name] for r in scored]
    columns.append(axis_heights([repr(m) for m in metric]))
    canvas = Canvas()
    canvas.fig.set_size_inches(max(6.4, 2.2 * len(axes)), 4.2)
    ax = canvas.axes[0]
    colour = Normalize(min(metric), max(metric))
    cmap = colormaps["viridis_r" if name.endswith(("loss", "nats", "_ms", "_s")) else "viridis"]
    for i, run in enumerate(scored):
        (line,) = ax.plot(
            range(len(axes)),
            [heights[i] for heights, _ in columns],
            color=cmap(colour(metric[i])),
            alpha=0.8,
            marker="o",
            markersize=3,
        )
        canvas.tip(line, f"{run_label(run, keys)}\n{name}: {metric[i]:.4g}")
    for x, (_, ticks) in enumerate(columns):
        ax.axvline(x, color="grey", linewidth=0.8)
        for height, text in ticks:
            ax.annotate(text, (x, height), xytext=(3, 0), textcoords="offset points", fontsize=7)
    ax.set_xticks(range(len(axes)), axes, fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.1, len(axes) - 0.6)
    canvas.fig.colorbar(ScalarMappable(colour, cmap), ax=ax, label=name)
    return Figure(
        "Swept keys against the optimised metric",
        f"Parallel coordinates: one line per run through its value of each swept key (numbers "
        f"scaled to the axis, log where they span 100x; categories in sorted order) and its "
        f"{name}, which also colours it (the better, the more yellow).",
        canvas.svg(),
    )


def importances(parent: Run | None) -> Figure | None:
    """The Optuna study's parameter importances, as its sweeper tagged them on the parent."""
    tags = parent.data.tags if parent is not None else {}
    found = {
        k.removeprefix(IMPORTANCE_TAG): float(v)
        for k, v in tags.items()
        if k.startswith(IMPORTANCE_TAG)
    }
    if not found:
        return None
    ordered = sorted(found.items(), key=lambda item: item[1])
    canvas = Canvas()
    ax = canvas.axes[0]
    bars = ax.barh([k for k, _ in ordered], [v for _, v in ordered], color="C0")
    for bar, (key, share) in zip(bars, ordered, strict=True):
        canvas.tip(bar, f"{key}: {share:.3f} of the variance of the study's values")
    ax.set_xlabel("importance (share of the variance explained, sums to 1)")
    ax.set_xlim(0, 1)
    ax.grid(alpha=0.3, axis="x")
    study = tags.get(step_tag("optuna", "study"), "")
    return Figure(
        "Parameter importances",
        f"How much of the spread of the optimised metric each parameter of Optuna study {study} "
        "explains, from its completed trials (Optuna's default evaluator, PED-ANOVA).",
        canvas.svg(),
    )
