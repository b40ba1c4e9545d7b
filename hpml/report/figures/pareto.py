"""Latency against size of every optimised variant, its Pareto front marked."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from hpml import names
from hpml.analysis.stats import Interval, median_ci, ratio_ci, verdict
from hpml.names import AFTER, BEFORE, SIDES, human, latency, prefixed, side, size, val_acc
from hpml.report.canvas import UNITS, Canvas, Figure, key_values, log_if_wide, run_label
from hpml.report.groups import STEPS, Group, noisy, sign
from hpml.report.series import MARKERS, REPEATS, metric_values, spread_text
from hpml.report.table import value

if TYPE_CHECKING:
    from mlflow.entities import Run


def pareto(
    points: list[tuple[float, float]], faster: Callable[[int, int], int] | None = None
) -> list[int]:
    """Indices of the points no other beats (lower is better in both): j beats i when it is no
    larger and no slower, and smaller or faster. ``faster(i, j)``: +1 when j's y is really below
    i's, -1 above, 0 within noise; by default the numbers decide."""

    def ahead(i: int, j: int) -> int:
        if faster is not None:
            return faster(i, j)
        mine, theirs = points[i][1], points[j][1]
        return (theirs < mine) - (theirs > mine)

    return [
        i
        for i, (x, _) in enumerate(points)
        if not any(
            j != i and a <= x and (s := ahead(i, j)) >= 0 and (a < x or s > 0)
            for j, (a, _) in enumerate(points)
        )
    ]


def latency_size(runs: list[Run], keys: list[str]) -> Figure | None:
    """Latency at batch 1 against size for every variant measured before and after pruning,
    quantisation or compilation, a config's repeats pooled, the Pareto front marked."""
    variants: dict[tuple[tuple[str, ...], str, str], list[Run]] = defaultdict(list)
    for run in runs:
        config = tuple(value(run, k) for k in keys)
        for step in STEPS:
            for when in SIDES:
                stage = side(step, when)
                if size(stage) in run.data.metrics and latency(stage) in run.data.metrics:
                    variants[(config, step, when)].append(run)
    found: list[tuple[float, Interval, str]] = []
    for (_, step, when), members in variants.items():
        metrics = [r.data.metrics for r in members]
        stage = side(step, when)
        bytes_ = median_ci([m[size(stage)] for m in metrics]).median
        ms = median_ci([m[latency(stage)] for m in metrics])
        qualities = metric_values(members, val_acc(stage))
        extra = "" if not qualities else f", val acc {median_ci(qualities).median:.3g} %"
        what = f"{human(bytes_)}, {spread_text(ms)} ms{extra}"
        found.append((bytes_, ms, f"{run_label(members[0], keys)}\n{step} {when}: {what}"))
    if len(found) < 2:
        return None
    order = list(variants)

    def faster(i: int, j: int) -> int:
        """Whether j's latency is really below i's: the step's side-by-side verdict for one
        config's before/after, else the repeats' ratio interval."""
        (ci, si, wi), (cj, sj, wj) = order[i], order[j]
        if (ci, si) == (cj, sj) and wi != wj:
            said = Group("", tuple(variants[order[i]])).speedup(si, 1)
            if said is not None:
                return sign(said.verdict) * (1 if wj == AFTER else -1)
        mine, theirs = (
            [r.data.metrics[latency(side(s, w))] for r in variants[(c, s, w)]]
            for c, s, w in (order[i], order[j])
        )
        loud = any(noisy(r) for r in (*variants[order[i]], *variants[order[j]]))
        return sign(verdict(ratio_ci(mine, theirs), noisy=loud))

    canvas = Canvas()
    canvas.fig.set_size_inches(9.6, 4.2)  # room for the legend beside the plot
    ax = canvas.axes[0]
    front = set(pareto([(x, ci.median) for x, ci, _ in found], faster))
    factor, unit = prefixed([x for x, _, _ in found], "B")
    styles: dict[str, dict[str, object]] = {}
    for index, ((x, ci, tip), key) in enumerate(zip(found, order, strict=True)):
        name = _variant(variants[key][0], keys, key[1], key[2])
        first = name not in styles
        if first:
            n = len(styles)
            colour = "0.45" if key[2] == BEFORE else f"C{n % 10}"
            styles[name] = {"color": colour, "marker": MARKERS[n % len(MARKERS)]}
        style = styles[name]
        tip += "\n(Pareto front)" if index in front else ""
        canvas.point(ax, x / factor, ci.median, tip, label=name if first else None, **style)
        if ci.n > 1:
            bars = [[ci.median - ci.low], [ci.high - ci.median]]
            ax.errorbar([x / factor], [ci.median], bars, capsize=3, **style)
    edge = sorted((found[i][0] / factor, found[i][1].median) for i in front)
    ax.plot(
        [x for x, _ in edge],
        [y for _, y in edge],
        color="C3",
        linestyle="--",
        marker="o",
        markersize=13,
        markerfacecolor="none",
        label="Pareto front",
    )
    if not log_if_wide(ax, "x", [x / factor for x, _, _ in found]):
        ax.margins(x=0.1)
    log_if_wide(ax, "y", [ci.median for _, ci, _ in found])
    ax.set_xlabel(f"model size, saved state dict ({unit})")
    ax.set_ylabel("latency at batch 1, median (ms)")
    canvas.legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return Figure(
        "Latency vs size of the optimised variants",
        "Every model measured before and after pruning, quantisation or compilation, each "
        "variant its own colour and marker (grey: before the step); ringed in red and joined "
        "by a dashed line: the Pareto front (no other variant is both smaller and faster); "
        "a log axis where values span more than 10x. A variant is "
        "off the front only where another is no larger and no slower, and smaller or faster, "
        "counting a latency difference only when its verdict is faster or slower: a model's "
        "before against its after by the step's side-by-side interval, separate configs by "
        "the interval over their repeats (one run each: within noise, a tie)."
        + REPEATS
        + " "
        + UNITS,
        canvas.svg(),
    )


def _variant(run: Run, keys: list[str], step: str, when: str) -> str:
    """A legend's name for a run's model ``when`` ``step``: ``prune: l1_structured, 80 %``
    after, ``before prune`` before, each with the run's values of the other swept keys."""
    others = key_values(run, [k for k in keys if k != step and not k.startswith(f"{step}.")])
    if when == BEFORE:
        return ", ".join(filter(None, [f"before {step}", others]))
    option = run.data.tags.get(names.choice_tag(step)) or run.data.params.get(f"{step}.method", "")
    own = [
        f"{100 * float(value(run, k)):g} %" if k == "prune.amount" else key_values(run, [k])
        for k in keys
        if k.startswith(f"{step}.")
    ]
    return ", ".join(filter(None, [f"{step}: {option}", *own, others]))
