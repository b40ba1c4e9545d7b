"""Learning curves: every run's validation loss per epoch, overlaid."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hpml.names import VAL_LOSS
from hpml.report.canvas import Canvas, Figure, distinct_labels, log_if_wide, run_label
from hpml.report.series import LINESTYLES, MARKERS

if TYPE_CHECKING:
    from mlflow.entities import Run


def learning_curves(
    runs: list[Run], keys: list[str], history: Callable[[Run, str], list[tuple[int, float]]]
) -> Figure | None:
    """``val/loss`` per epoch of every run, overlaid; ``history(run, name)`` gives its points."""
    curves = [(run, history(run, VAL_LOSS)) for run in runs]
    curves = [(run, points) for run, points in curves if points]
    if not curves:
        return None
    canvas = Canvas()
    canvas.fig.set_size_inches(9.6, 4.2)  # room for a legend of every run beside the plot
    ax = canvas.axes[0]
    names = distinct_labels([run for run, _ in curves], keys)
    for index, ((run, points), name) in enumerate(zip(curves, names, strict=True)):
        xs = list(range(1, len(points) + 1))
        ys = [value for _, value in points]
        style = {"color": f"C{index % 10}", "linestyle": LINESTYLES[index // 10 % 4]}
        size = 9 - 2 * (index % 3)  # curves on top of each other: the markers still show
        marker = MARKERS[index % len(MARKERS)]
        ax.plot(xs, ys, alpha=0.8, marker=marker, markersize=size, label=name, **style)
        tip = f"{run_label(run, keys)}\n{VAL_LOSS} {ys[-1]:.4g} after {xs[-1]} epochs"
        canvas.point(ax, xs[-1], ys[-1], tip, color=style["color"], marker=marker, markersize=size)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlim(0.5, max(len(points) for _, points in curves) + 0.5)
    log_if_wide(ax, "y", [y for _, points in curves for _, y in points])
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{VAL_LOSS} (the model's loss)")
    ax.grid(alpha=0.3)
    canvas.legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1 + len(curves) // 25)
    return Figure(
        "Learning curves",
        "Validation loss after each epoch, every run overlaid, named in the legend by its "
        "values of the keys that differ between them (its job where two share them).",
        canvas.svg(),
    )
