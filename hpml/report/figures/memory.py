"""The memory figure: the first training step's tensors by part, beside the run's peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpml.names import BYTES, MEMORY_PEAK, PEAK_MEMORY_SOURCE_TAG, human, metric, prefixed
from hpml.report.canvas import (
    UNITS,
    Canvas,
    Figure,
    distinct_labels,
    fit,
    log_if_wide,
    plain,
    run_label,
    varying,
)
from hpml.report.table import differing_keys

if TYPE_CHECKING:
    from mlflow.entities import Run

MEMORY_PARTS = ("weights", "gradients", "optimizer_state", "activations")


def memory(runs: list[Run], _keys: list[str]) -> Figure | None:
    """Stacked bars of the first training step's tensors by part, per run, and beside them the
    tensors' total against the peak; a bar a run, named by what differs between the runs (the
    runs table's keys), not by the configs' keys that the other plots take."""
    names = {part: metric("memory", part, BYTES) for part in MEMORY_PARTS}
    measured = [r for r in runs if all(n in r.data.metrics for n in names.values())]
    if not measured:
        return None
    peaks = [r.data.metrics.get(MEMORY_PEAK) for r in measured]
    canvas = Canvas(panels=2 if any(p is not None for p in peaks) else 1)
    ax = canvas.axes[0]
    totals = [sum(r.data.metrics[n] for n in names.values()) for r in measured]
    factor, unit = prefixed(totals, "B")
    shown = varying(measured, differing_keys(measured))  # the runs table's keys: a bar a run
    ticks = distinct_labels(measured, shown, named=False)
    tips = [run_label(run, shown) for run in measured]
    across = fit(f"run ({', '.join(k.rsplit('.', 1)[-1] for k in shown)})" if shown else "run", 70)
    bottoms = [0.0] * len(measured)
    for index, (part, name) in enumerate(names.items()):
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
            f"{part.replace('_', ' ')} {human(run.data.metrics[n])}" for part, n in names.items()
        )
        tip = f"{tips[i]}\ntensors {human(totals[i])}: {parts}"
        canvas.point(ax, i, bottoms[i], tip, color="k", markersize=3)
    canvas.ticks(ax, ticks, tips)
    ax.set_xlabel(across)
    ax.set_ylabel(f"tensors of the first training step ({unit})")
    canvas.legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    sources = {r.data.tags.get(PEAK_MEMORY_SOURCE_TAG, "process peak RSS") for r in measured}
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
                canvas.tip(bar, f"{tips[i]}\n{what}: {human(v)}")
        log_if_wide(ax, "y", [v / factor for v in both])
        canvas.ticks(ax, ticks, tips)
        ax.set_xlabel(across)
        ax.set_ylabel(f"memory ({unit})")
        canvas.legend(ax, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2)
    over = [p / t for p, t in zip(peaks, totals, strict=True) if p is not None and t > 0]
    here = ""
    if over:  # one figure where every run's ratio rounds alike
        ends = dict.fromkeys(f"{plain(float(f'{x:.2g}'))}x" for x in (min(over), max(over)))
        here = f"Here the peak is {' to '.join(ends)} the tensors' total. "
    return Figure(
        "Memory breakdown",
        "Left: weights, gradients, optimiser state and the activations autograd saved for "
        "backward in the first training step, each tensor storage counted once; tensors only. "
        "Right: that total beside the run's peak memory (memory/peak_bytes). "
        + (
            "On CUDA the peak is torch.cuda.max_memory_allocated: every tensor alive at once, "
            "temporaries and workspaces included, but not the allocator's cached free blocks or "
            "the CUDA context. "
            if any(s.startswith("torch.cuda") for s in sources)
            else ""
        )
        + (
            "On the CPU the peak is the process's peak resident set size (on Linux VmHWM, "
            "reset when each stage begins): it also holds the Python interpreter, torch's and "
            "the other libraries' code, the data loader's batches, temporaries freed within the "
            "step and the allocator's caches. "
            if any(not s.startswith("torch.cuda") for s in sources)
            else ""
        )
        + here
        + UNITS,
        canvas.svg(),
    )
