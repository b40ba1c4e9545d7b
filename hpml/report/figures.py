"""The report's plots, each drawn only when the runs carry its data (:mod:`hpml.report.canvas`
renders them as SVG with tooltips)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from hpml.analysis.profile_summary import CATEGORIES
from hpml.analysis.stats import Interval, median_ci, ratio_ci, verdict
from hpml.names import PCT, metric
from hpml.report.canvas import (
    UNITS,
    Canvas,
    Figure,
    distinct_labels,
    human,
    log_if_wide,
    plain,
    prefixed,
    run_label,
    ticks_at,
)
from hpml.report.series import (
    LINESTYLES,
    MARKERS,
    REPEATS,
    legend_above,
    param_value,
    series_name,
    series_panels,
    spread_text,
)
from hpml.report.table import value

if TYPE_CHECKING:
    from mlflow.entities import Run

MEMORY_PARTS = ("weights", "gradients", "optimizer_state", "activations")
VARIANTS = ("prune", "quant", "compile")  # steps measured before and after (callbacks.measure)


def batch_scaling(runs: list[Run], keys: list[str]) -> Figure | None:
    """Throughput and step time against batch size, a line per other config."""
    key, speed, step = "data.batch_size", "train/throughput_samples_per_s", "train/step_time_p50_ms"
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
        ticks_at(ax, "x", [param_value(r, key) or 0 for r in measured], log2=True)
        ax.set_xlabel("batch size (samples)")
    legend_above(canvas.axes[0])
    return Figure(
        "Throughput and step time vs batch size",
        "Training samples per second (median over the timed steps) and median step time (ms) "
        "at each batch size, a line per value of the other swept keys; a log axis where values "
        "span more than 10x." + REPEATS,
        canvas.svg(),
    )


def time_shares(runs: list[Run], keys: list[str]) -> Figure | None:
    """Where a profiled training step's time went, by category, against batch size: stacked
    bars, a panel per other config (data copies shrink as batches grow)."""
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
        ax.set_title(group, fontsize=9)
    canvas.axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return Figure(
        "Time share by category vs batch size",
        "Each instant of the profiled training steps goes to the highest-priority activity "
        "running then (CUDA: kernel > memcpy > memset > runtime > data loading > CPU exec; "
        "CPU: data loading > operator compute > framework overhead), so the shares sum to "
        "100 %.",
        canvas.svg(),
    )


def sparsity(runs: list[Run], keys: list[str]) -> Figure | None:
    """Validation loss and forward FLOPs after pruning against the sparsity asked for, a line
    per pruner (and other swept values) from the unpruned model at 0 %."""
    loss, flops = "prune_after/val_loss_nats", "prune_after/fwd_flops_per_sample"
    pruned = [
        r for r in runs if param_value(r, "prune.amount") is not None and loss in r.data.metrics
    ]
    if len(pruned) < 2:
        return None
    canvas = series_panels(
        pruned,
        keys,
        lambda r: 100 * (param_value(r, "prune.amount") or 0),
        lambda r: ", ".join(
            [r.data.params.get("prune.method", "?")]
            + [f"{k}={value(r, k)}" for k in keys if k not in ("prune", "prune.amount")]
        ),
        (loss, flops),
        {loss: "prune_before/val_loss_nats", flops: "prune_before/fwd_flops_per_sample"},
    )
    for ax in canvas.axes:
        ax.set_xlabel("sparsity asked for, prune.amount (%)")
    legend_above(canvas.axes[0], title="prune.method")
    return Figure(
        "Loss and FLOPs vs sparsity",
        "Validation loss (nats) right after pruning, before any fine-tuning, and forward FLOPs "
        "per sample, per pruner. At 0 %, in black with a dotted line across: the model before "
        "pruning (prune_before/..., the median over the runs, each of which measured its own). "
        "Lines that lie on top of each other keep their own markers." + REPEATS + " " + UNITS,
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
    quantisation or compilation, a config's repeats pooled, the Pareto front marked; each
    variant its own colour and marker, named in the legend (method, sparsity)."""
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
        what = f"{human(size)}, {spread_text(latency)} ms{extra}"
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
            colour = "0.45" if key[2] == "before" else f"C{n % 10}"
            styles[name] = {"color": colour, "marker": MARKERS[n % len(MARKERS)]}
        style = styles[name]
        on_front = index in front
        tip += "\n(Pareto front)" if on_front else ""
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
    if not log_if_wide(ax, "x", [x for x, _ in edge] + [x / factor for x, _, _ in found]):
        ax.margins(x=0.1)
    log_if_wide(ax, "y", [ci.median for _, ci, _ in found])
    ax.set_xlabel(f"model size, saved state dict ({unit})")
    ax.set_ylabel("latency at batch 1, median (ms)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
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
    """A legend's name for a run's model ``when`` (before, after) ``step``: ``prune:
    l1_structured, 80 %`` after, ``before prune`` (the same model for every pruner) before,
    each with the run's values of the other swept keys."""
    others = [f"{k}={value(run, k)}" for k in keys if k != step and not k.startswith(f"{step}.")]
    if when == "before":
        return ", ".join([f"before {step}", *others])
    option = run.data.tags.get(f"hpml.choice.{step}") or run.data.params.get(f"{step}.method", "")
    own = [
        f"{100 * float(value(run, k)):g} %" if k == "prune.amount" else f"{k}={value(run, k)}"
        for k in keys
        if k.startswith(f"{step}.")
    ]
    return ", ".join([f"{step}: {option}", *own, *others])


def memory(runs: list[Run], keys: list[str]) -> Figure | None:
    """Stacked bars of the first training step's tensors, by part, per run, and beside them
    the tensors' total against the process's peak."""
    names = [f"memory/{part}_bytes" for part in MEMORY_PARTS]
    measured = [r for r in runs if all(n in r.data.metrics for n in names)]
    if not measured:
        return None
    peaks = [r.data.metrics.get("memory/peak_bytes") for r in measured]
    canvas = Canvas(panels=2 if any(p is not None for p in peaks) else 1)
    ax = canvas.axes[0]
    totals = [sum(r.data.metrics[n] for n in names) for r in measured]
    factor, unit = prefixed(totals, "B")
    ticks = distinct_labels(measured, keys, named=False)
    across = f"run ({', '.join(keys)})" if keys else "run"
    bottoms = [0.0] * len(measured)
    for index, (part, name) in enumerate(zip(MEMORY_PARTS, names, strict=True)):
        heights = [r.data.metrics[name] / factor for r in measured]
        ax.bar(
            range(len(measured)),
            heights,
            bottom=bottoms,
            color=f"C{index}",
            label=part.replace("_", " "),
        )
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for i, run in enumerate(measured):
        parts = ", ".join(
            f"{part.replace('_', ' ')} {human(run.data.metrics[n])}"
            for part, n in zip(MEMORY_PARTS, names, strict=True)
        )
        canvas.point(
            ax,
            i,
            bottoms[i],
            f"{run_label(run, keys)}\ntensors {human(totals[i])}: {parts}",
            color="k",
            markersize=3,
        )
    ax.set_xticks(range(len(measured)), ticks, fontsize=7)
    ax.set_xlabel(across)
    ax.set_ylabel(f"tensors of the first training step ({unit})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    sources = {r.data.tags.get("hpml.peak_memory_source", "process peak RSS") for r in measured}
    if len(canvas.axes) == 2:
        ax = canvas.axes[1]
        shown = [(i, p) for i, p in enumerate(peaks) if p is not None]
        both = [totals[i] for i, _ in shown] + [p for _, p in shown]
        factor, unit = prefixed([min(both)], "B")  # a log axis: its smallest bar at 1 or more
        for offset, colour, what, values in (
            (-0.2, "C7", "tensors (the breakdown's total)", [totals[i] for i, _ in shown]),
            (0.2, "C9", f"peak: {', '.join(sorted(sources))}", [p for _, p in shown]),
        ):
            bars = ax.bar(
                [i + offset for i, _ in shown],
                [v / factor for v in values],
                0.4,
                color=colour,
                label=what,
            )
            for bar, (i, _), v in zip(bars, shown, values, strict=True):
                canvas.tip(bar, f"{run_label(measured[i], keys)}\n{what}: {human(v)}")
        log_if_wide(ax, "y", [v / factor for v in both])
        ax.set_xticks(range(len(measured)), ticks, fontsize=7)
        ax.set_xlabel(across)
        ax.set_ylabel(f"memory ({unit})")
        ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2)
    cuda = any(s.startswith("torch.cuda") for s in sources)
    over = [p / t for p, t in zip(peaks, totals, strict=True) if p is not None and t > 0]
    here = (
        f"Here the peak is {plain(float(f'{min(over):.2g}'))}x to "
        f"{plain(float(f'{max(over):.2g}'))}x the tensors' total. "
        if over
        else ""
    )
    return Figure(
        "Memory breakdown",
        "Left: weights, gradients, optimiser state and the activations autograd saved for "
        "backward in the first training step, each tensor storage counted once; tensors only. "
        "Right: that total beside the run's peak memory (memory/peak_bytes). "
        + (
            "On CUDA the peak is torch.cuda.max_memory_allocated: every tensor alive at once, "
            "temporaries and workspaces included, but not the allocator's cached free blocks or "
            "the CUDA context. "
            if cuda
            else ""
        )
        + (
            "On the CPU the peak is the process's peak resident set size (ru_maxrss): it also "
            "holds the Python interpreter, torch's and the other libraries' code, the data "
            "loader's batches, temporaries freed within the step and the allocator's caches. "
            if any(not s.startswith("torch.cuda") for s in sources)
            else ""
        )
        + here
        + UNITS,
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
        canvas.point(
            ax,
            xs[-1],
            ys[-1],
            f"{run_label(run, keys)}\nval/loss {ys[-1]:.4g} after {xs[-1]} epochs",
            color=style["color"],
            marker=marker,
            markersize=size,
        )
    from matplotlib.ticker import MaxNLocator

    epochs = max(len(points) for _, points in curves)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlim(0.5, epochs + 0.5)
    log_if_wide(ax, "y", [y for _, points in curves for _, y in points])
    ax.set_xlabel("epoch")
    ax.set_ylabel("val/loss (the model's loss)")
    ax.grid(alpha=0.3)
    ax.legend(
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
        ncols=1 + len(curves) // 25,
    )
    return Figure(
        "Learning curves",
        "Validation loss after each epoch, every run overlaid, named in the legend by its "
        "values of the swept keys (its job where two share them).",
        canvas.svg(),
    )


PLOTS = (batch_scaling, time_shares, sparsity, latency_size, memory)
