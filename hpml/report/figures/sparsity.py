"""The pruning figure: loss and FLOPs against the sparsity asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpml.names import AFTER, BEFORE, fwd_flops, side, val_loss
from hpml.report.canvas import UNITS, Figure, key_values, varying
from hpml.report.series import REPEATS, legend_above, param_value, series_panels

if TYPE_CHECKING:
    from mlflow.entities import Run


def sparsity(runs: list[Run], keys: list[str]) -> Figure | None:
    """Validation loss and forward FLOPs after pruning against the sparsity asked for, a line
    per pruner (and other swept values) from the unpruned model at 0 %."""
    before, after = side("prune", BEFORE), side("prune", AFTER)
    loss, flops = val_loss(after), fwd_flops(after)
    pruned = [
        r for r in runs if param_value(r, "prune.amount") is not None and loss in r.data.metrics
    ]
    if len(pruned) < 2:
        return None
    others = varying(pruned, [k for k in keys if k not in ("prune", "prune.amount")])
    canvas = series_panels(
        pruned,
        keys,
        lambda r: 100 * (param_value(r, "prune.amount") or 0),
        lambda r: ", ".join(
            filter(None, [r.data.params.get("prune.method", "?"), key_values(r, others)])
        ),
        (loss, flops),
        {loss: val_loss(before), flops: fwd_flops(before)},
    )
    for ax in canvas.axes:
        ax.set_xlabel("sparsity asked for, prune.amount (%)")
    legend_above(canvas, canvas.axes[0], title="prune.method")
    return Figure(
        "Loss and FLOPs vs sparsity",
        "Validation loss (nats) right after pruning, before any fine-tuning, and forward FLOPs "
        "per sample, per pruner. At 0 %, in black with a dotted line across: the model before "
        "pruning (prune_before/..., the median over the runs, each of which measured its own). "
        "Lines that lie on top of each other keep their own markers." + REPEATS + " " + UNITS,
        canvas.svg(),
    )
