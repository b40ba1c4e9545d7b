"""The report's plots, each drawn only when the runs carry its data (:mod:`hpml.report.canvas`
renders them as SVG with tooltips)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from hpml.analysis.profile_summary import CATEGORIES
from hpml.analysis.stats import Interval, median_ci, ratio_ci, verdict
from hpml.names import PCT, label, metric
from hpml.report.canvas import Canvas, Figure, run_label
from hpml.report.table import value

if TYPE_CHECKING:
    from mlflow.entities import Run

MEMORY_PARTS = ("weights", "gradients", "optimizer_state", "activations")
VARIANTS = ("prune", "quant", "compile")  # steps measured before and after (callbacks.measure)
REPEATS = (
    " A config run more than once (replicate) is one point, the median of its repeats, with "
    "their interval as error bars (order-statistic 95%; [min, max] for fewer than 6 repeats)."
)


def _param(run: Run, key: str) -> float | None:
    try:
        return float(run.data.params[key])
    except (KeyError, ValueError):
        return None


def _group(run: Run, keys: list[str], left_out: str) -> str:
    """The series a run belongs to: its values of the varied keys other than ``left_out``."""
    return ", ".join(f"{k}={value(run, k)}" for k in keys if k != left_out) or "runs"


def _repeats(
    runs: list[Run], x: Callable[[Run], float], name: str
) -> list[tuple[float, Interval | None, list[Run]]]:
    """Runs at each ``x`` (a series' repeats of one config), their median of ``name`` with its
    interval (None where none logged it), by ``x``."""
    at: dict[float, list[Run]] = defaultdict(list)
    for run in runs:
        at[x(run)].append(run)
    found = []
    for px, repeats in sorted(at.items()):
        values = [v for r in repeats if (v := r.data.metrics.get(name)) is not None]
        found.append((px, median_ci(values) if values else None, repeats))
    return found


def _spread(ci: Interval) -> str:
    """A tooltip's ``0.5 [0.4, 0.6], n=3 (75% interval)``; one run's value alone."""
    if ci.n == 1:
        return f"{ci.median:.4g}"
    return (
        f"median {ci.median:.4g} [{ci.low:.4g}, {ci.high:.4g}], n={ci.n} "
        f"({ci.coverage:.0%} interval)"
    )


def _lines(
    runs: list[Run],
    keys: list[str],
    x: Callable[[Run], float],
    series: Callable[[Run], str],
    names: tuple[str, str],
) -> Canvas:
    """Two panels, metric ``names[i]`` against ``x``, a line per ``series``, points with tips."""
    canvas = Canvas(panels=2)
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[series(run)].append(run)
    for ax, name in zip(canvas.axes, names, strict=True):
        for index, (group, members) in enumerate(sorted(groups.items())):
            points = _repeats(members, x, name)
            xs = [px for px, _, _ in points]
            ys = [ci.median if ci else float("nan") for _, ci, _ in points]
            ax.plot(xs, ys, color=f"C{index}", label=group)
            for px, ci, repeats in points:
                if ci is None:
                    continue
                tip = f"{run_label(repeats[0], keys)}\n{label(name)}: {_spread(ci)}"
                canvas.point(ax, px, ci.median, tip, color=f"C{index}")
                if ci.n > 1:
                    low, high = ci.median - ci.low, ci.high - ci.median
                    ax.errorbar([px], [ci.median], [[low], [high]], color=f"C{index}", capsize=3)
        ax.set_ylabel(label(name))
        ax.grid(alpha=0.3)
    return canvas


def batch_scaling(runs: list[Run], keys: list[str]) -> Figure | None:
    """Throughput and step time against batch size (study 2), a line per other config."""
    key, speed, step = "data.batch_size", "train/throughput_samples_per_s", "train/step_time_p50_ms"
    measured = [r for r in runs if _param(r, key) is not None and speed in r.data.metrics]
    if key not in keys or len(measured) < 2:
        return None
    canvas = _lines(
        measured, keys, lambda r: _param(r, key) or 0, lambda r: _group(r, keys, key), (speed, step)
    )
    for ax in canvas.axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (samples)")
    canvas.axes[0].legend(fontsize=7)
    return Figure(
        "Throughput and step time vs batch size",
        "Training samples per second and median step time at each batch size (study 2)." + REPEATS,
        canvas.svg(),
    )


def time_shares(runs: list[Run], keys: list[str]) -> Figure | None:
    """Where a profiled training step's time went, by category, against batch size: stacked
    bars, a panel per other config (study 2: data copies shrink as batches grow)."""
    key = "data.batch_size"
    names = {c: metric("profile", c, PCT) for c in CATEGORIES}
    profiled = [
        r
        for r in runs
        if _param(r, key) is not None and any(n in r.data.metrics for n in names.values())
    ]
    if key not in keys or len({_param(r, key) for r in profiled}) < 2:
        return None
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in profiled:
        groups[_group(run, keys, key)].append(run)
    shown = [c for c, n in names.items() if any(n in r.data.metrics for r in profiled)]
    canvas = Canvas(panels=len(groups))
    for ax, (group, members) in zip(canvas.axes, sorted(groups.items()), strict=True):
        members.sort(key=lambda r: _param(r, key) or 0)
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
        ax.set_xticks(range(len(members)), [f"{_param(r, key):g}" for r in members])
        ax.set_xlabel("batch size (samples)")
        ax.set_ylabel("share of the profiled steps' time (%)")
        ax.set_ylim(0, 100)
        ax.set_title(group, fontsize=9)
    canvas.axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return Figure(
        "Time share by category vs batch size",
        "Each instant of the profiled training steps goes to the highest-priority activity "
        "running then (CUDA: kernel > memcpy > memset > runtime > data loading > CPU exec; "
        "CPU: data loading > operator compute > framework overhead), so the shares sum to 100 % "
        "(study 2).",
        canvas.svg(),
    )


def sparsity(runs: list[Run], keys: list[str]) -> Figure | None:
    """Validation loss and forward FLOPs after pruning against the sparsity asked for, a line
    per pruner (study 3)."""
    loss, flops = "prune_after/val_loss_nats", "prune_after/fwd_flops_per_sample"
    pruned = [r for r in runs if _param(r, "prune.amount") is not None and loss in r.data.metrics]
    if len(pruned) < 2:
        return None
    canvas = _lines(
        pruned,
        keys,
        lambda r: 100 * (_param(r, "prune.amount") or 0),
        lambda r: r.data.params.get("prune.method", "?"),
        (loss, flops),
    )
    for ax in canvas.axes:
        ax.set_xlabel("sparsity asked for, prune.amount (%)")
    canvas.axes[0].legend(fontsize=7, title="prune.method")
    return Figure(
        "Loss and FLOPs vs sparsity",
        "Validation loss right after pruning and forward FLOPs per sample, per pruner (study 3)."
        + REPEATS,
        canvas.svg(),
    )


def pareto(
    points: list[tuple[float, float]], faster: Callable[[int, int], int] | None = None
) -> list[int]:
    """Indices of the points no other beats (lower is better in both): j beats i when it is no
    larger and no slower, and smaller or faster. ``faster(i, j)``: +1 when j's y is really below
    i's, -1 when really above, 0 when the difference is within noise (a tie); by default the
    numbers decide."""

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
    quantisation or compilation, a config's repeats pooled, the Pareto front marked (study 1)."""
    from hpml.report.groups import Group, noisy, sign

    variants: dict[tuple[tuple[str, ...], str, str], list[Run]] = defaultdict(list)
    for run in runs:
        config = tuple(value(run, k) for k in keys)
        for step in VARIANTS:
            for when in ("before", "after"):
                size, latency = f"{step}_{when}/size_bytes", f"{step}_{when}/latency_b1_ms"
                if size in run.data.metrics and latency in run.data.metrics:
                    variants[(config, step, when)].append(run)
    found: list[tuple[float, Interval, str]] = []
    for (_, step, when), members in variants.items():
        metrics = [r.data.metrics for r in members]
        size = median_ci([m[f"{step}_{when}/size_bytes"] for m in metrics]).median
        latency = median_ci([m[f"{step}_{when}/latency_b1_ms"] for m in metrics])
        qualities = [q for m in metrics if (q := m.get(f"{step}_{when}/val_acc_pct")) is not None]
        extra = "" if not qualities else f", val acc {median_ci(qualities).median:.3g} %"
        what = f"{size:,.0f} bytes, {_spread(latency)} ms{extra}"
        found.append((size, latency, f"{run_label(members[0], keys)}\n{step} {when}: {what}"))
    if len(found) < 2:
        return None
    order = list(variants)

    def faster(i: int, j: int) -> int:
        """Whether variant j's latency is really below i's: the step's side-by-side verdict
        for a before/after of one config, else the repeats' ratio interval."""
        (ci, si, wi), (cj, sj, wj) = order[i], order[j]
        if (ci, si) == (cj, sj) and wi != wj:
            said = Group("", tuple(variants[order[i]])).speedup(si, 1)
            if said is not None:
                return sign(said.verdict) * (1 if wj == "after" else -1)
        mine, theirs = (
            [r.data.metrics[f"{s}_{w}/latency_b1_ms"] for r in variants[(c, s, w)]]
            for c, s, w in (order[i], order[j])
        )
        loud = any(noisy(r) for r in (*variants[order[i]], *variants[order[j]]))
        return sign(verdict(ratio_ci(mine, theirs), noisy=loud))

    canvas = Canvas()
    ax = canvas.axes[0]
    front = set(pareto([(x, ci.median) for x, ci, _ in found], faster))
    for index, (x, ci, tip) in enumerate(found):
        on_front = index in front
        style = {"color": "C3", "zorder": 3} if on_front else {"color": "C0"}
        canvas.point(ax, x, ci.median, tip + ("\n(Pareto front)" if on_front else ""), **style)
        if ci.n > 1:
            bars = [[ci.median - ci.low], [ci.high - ci.median]]
            ax.errorbar([x], [ci.median], bars, capsize=3, **style)
    edge = sorted((found[i][0], found[i][1].median) for i in front)
    ax.plot(
        [x for x, _ in edge], [y for _, y in edge], color="C3", linestyle="--", label="Pareto front"
    )
    ax.set_xscale("log")
    ax.set_xlabel("model size, saved state dict (bytes)")
    ax.set_ylabel("latency at batch 1, median (ms)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return Figure(
        "Latency vs size of the optimised variants",
        "Every model measured before and after pruning, quantisation or compilation; red: "
        "the Pareto front (no other variant is both smaller and faster) (study 1). A variant is "
        "off the front only where another is no larger and no slower, and smaller or faster, "
        "counting a latency difference only when its verdict is faster or slower: a model's "
        "before against its after by the step's side-by-side interval, separate configs by "
        "the interval over their repeats (one run each: within noise, a tie)." + REPEATS,
        canvas.svg(),
    )


def memory(runs: list[Run], keys: list[str]) -> Figure | None:
    """Stacked bars of the first training step's memory, by part, per run (study 4)."""
    names = [f"memory/{part}_bytes" for part in MEMORY_PARTS]
    measured = [r for r in runs if all(n in r.data.metrics for n in names)]
    if not measured:
        return None
    canvas = Canvas()
    ax = canvas.axes[0]
    bottoms = [0.0] * len(measured)
    for index, (part, name) in enumerate(zip(MEMORY_PARTS, names, strict=True)):
        heights = [r.data.metrics[name] / 2**20 for r in measured]
        ax.bar(
            range(len(measured)),
            heights,
            bottom=bottoms,
            color=f"C{index}",
            label=part.replace("_", " "),
        )
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for i, run in enumerate(measured):
        canvas.point(
            ax,
            i,
            bottoms[i],
            f"{run_label(run, keys)}\ntotal {bottoms[i]:.2f} MiB",
            color="k",
            markersize=3,
        )
    ax.set_xticks(
        range(len(measured)),
        [r.info.run_name[:18] for r in measured],
        rotation=30,
        ha="right",
        fontsize=7,
    )
    ax.set_ylabel("memory of the first training step (MiB)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return Figure(
        "Memory breakdown",
        "Weights, gradients, optimiser state and saved activations of the first training step.",
        canvas.svg(),
    )


def learning_curves(
    runs: list[Run], keys: list[str], history: Callable[[Run, str], list[tuple[int, float]]]
) -> Figure | None:
    """``val/loss`` per epoch of every run, overlaid; ``history(run, name)`` gives its points."""
    curves = [(run, history(run, "val/loss")) for run in runs]
    curves = [(run, points) for run, points in curves if points]
    if not curves:
        return None
    canvas = Canvas()
    ax = canvas.axes[0]
    for index, (run, points) in enumerate(curves):
        xs = list(range(1, len(points) + 1))
        ys = [value for _, value in points]
        ax.plot(xs, ys, color=f"C{index % 10}", alpha=0.8)
        canvas.point(
            ax,
            xs[-1],
            ys[-1],
            f"{run_label(run, keys)}\nval/loss {ys[-1]:.4g} after {xs[-1]} epochs",
            color=f"C{index % 10}",
        )
    from matplotlib.ticker import MaxNLocator

    epochs = max(len(points) for _, points in curves)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlim(0.5, epochs + 0.5)
    ax.set_xlabel("epoch")
    ax.set_ylabel("val/loss (the model's loss)")
    ax.grid(alpha=0.3)
    return Figure(
        "Learning curves", "Validation loss after each epoch, every run overlaid.", canvas.svg()
    )


PLOTS = (batch_scaling, time_shares, sparsity, latency_size, memory)
