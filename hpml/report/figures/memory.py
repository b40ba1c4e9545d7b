"""The memory figure: the first training step's tensors by part, beside the run's peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpml.names import BYTES, MEMORY_PEAK, metric
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
)

if TYPE_CHECKING:
    from mlflow.entities import Run

MEMORY_PARTS = ("weights", "gradients", "optimizer_state", "activations")


def memory(runs: list[Run], keys: list[str]) -> Figure | None:
    """Stacked bars of the first training step's tensors by part, per run, and beside them the
    tensors' total against the peak."""
    names = [metric("memory", part, BYTES) for part in MEMORY_PARTS]
    measured = [r for r in runs if all(n in r.data.metrics for n in names)]
    if not measured:
        return None
    peaks = [r.data.metrics.get(MEMORY_PEAK) for r in measured]
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
