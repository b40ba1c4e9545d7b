"""Series of runs on a figure's panels, as every plot draws them: a line per series, its own
colour and marker, a config's repeats folded into their median with their interval as error
bars."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from hpml.analysis.stats import Interval, median_ci
from hpml.names import label
from hpml.report.canvas import Canvas, key_values, log_if_wide, run_label, scaled

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from mlflow.entities import Run

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")  # one per series, beside colour
LINESTYLES = ("-", "--", ":", "-.")
REPEATS = (
    " A config run more than once (replicate) is one point, the median of its repeats, with "
    "their interval as error bars (order-statistic 95%; [min, max] for fewer than 6 repeats)."
)


def param_value(run: Run, key: str) -> float | None:
    try:
        return float(run.data.params[key])
    except (KeyError, ValueError):
        return None


def series_name(run: Run, keys: list[str], left_out: str) -> str:
    """The series a run belongs to: its values of the varied keys other than ``left_out``."""
    return key_values(run, [k for k in keys if k != left_out]) or "runs"


def repeat_points(
    runs: list[Run], x: Callable[[Run], float], name: str
) -> list[tuple[float, Interval | None, list[Run]]]:
    """Runs at each ``x`` (a series' repeats of one config), their median of ``name`` with its
    interval (None where none logged it), by ``x``."""
    at: dict[float, list[Run]] = defaultdict(list)
    for run in runs:
        at[x(run)].append(run)
    found = []
    for px, repeats in sorted(at.items()):
        values = metric_values(repeats, name)
        found.append((px, median_ci(values) if values else None, repeats))
    return found


def spread_text(ci: Interval) -> str:
    """A tooltip's ``0.5 [0.4, 0.6], n=3 (75% interval)``; one run's value alone."""
    if ci.n == 1:
        return f"{ci.median:.4g}"
    return (
        f"median {ci.median:.4g} [{ci.low:.4g}, {ci.high:.4g}], n={ci.n} "
        f"({ci.coverage:.0%} interval)"
    )


def series_panels(
    runs: list[Run],
    keys: list[str],
    x: Callable[[Run], float],
    series: Callable[[Run], str],
    names: tuple[str, str],
    before: dict[str, str] | None = None,
) -> Canvas:
    """Two panels, metric ``names[i]`` against ``x``, a line per ``series``, points with tips;
    each panel in a human unit, log where its values span more than 10x.

    Args:
        keys: the swept keys, for each point's tip.
        x: a run's position on the x axis.
        series: the name of a run's line.
        before: a panel's metric -> the metric of the model before the step the x axis
            varies, drawn at x = 0 (the median of every run's, a line across).
    """
    canvas = Canvas(panels=2)
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[series(run)].append(run)
    for ax, name in zip(canvas.axes, names, strict=True):
        base_name = (before or {}).get(name)
        base = (
            median_ci(values) if base_name and (values := metric_values(runs, base_name)) else None
        )
        every = metric_values(runs, name) + ([base.median] if base else [])
        factor, heading = scaled(name, every)
        for index, (group, members) in enumerate(sorted(groups.items())):
            points = repeat_points(members, x, name)
            xs = [px for px, _, _ in points]
            ys = [ci.median / factor if ci else float("nan") for _, ci, _ in points]
            if base is not None:
                xs, ys = [0.0, *xs], [base.median / factor, *ys]
            style = {"color": f"C{index % 10}", "marker": MARKERS[index % len(MARKERS)]}
            size = 9 - 2 * (index % 3)  # lines on top of each other: the markers still show
            ax.plot(xs, ys, label=group, markersize=size, alpha=0.85, **style)
            for px, ci, repeats in points:
                if ci is None:
                    continue
                tip = f"{run_label(repeats[0], keys)}\n{label(name)}: {spread_text(ci)}"
                canvas.point(ax, px, ci.median / factor, tip, markersize=size, **style)
                if ci.n > 1:
                    low, high = (ci.median - ci.low) / factor, (ci.high - ci.median) / factor
                    ax.errorbar([px], [ci.median / factor], [[low], [high]], capsize=3, **style)
        if base is not None:
            ax.axhline(base.median / factor, color="k", linestyle=":", linewidth=1)
            canvas.point(
                ax,
                0.0,
                base.median / factor,
                f"before the step: {label(base_name)}: {spread_text(base)}",
                color="k",
                zorder=3,
                label=f"before (0 %, median of {base.n})",
            )
        log_if_wide(ax, "y", [v / factor for v in every])
        ax.set_ylabel(heading)
        ax.grid(alpha=0.3)
    return canvas


def legend_above(canvas: Canvas, ax: Axes, title: str | None = None) -> None:
    """The series' legend above the panel, where it hides no line (both panels share it)."""
    canvas.legend(
        ax,
        title=title,
        title_fontsize=7,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.02),
        ncols=1 if len(ax.get_legend_handles_labels()[1]) <= 3 else 2,
    )


def metric_values(runs: list[Run], name: str) -> list[float]:
    return [v for r in runs if (v := r.data.metrics.get(name)) is not None]
