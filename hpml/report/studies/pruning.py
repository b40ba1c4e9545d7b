"""Study 3's table: pruner x sparsity, a row per pruned config (its repeats collapsed): layer
widths, FLOPs, size, losses, latency, and ``print(model)`` before and after."""

from __future__ import annotations

import json
import math

from hpml.names import AFTER, BEFORE, FLOPS_REDUCTION, SIDES, fwd_flops, side, size, val_loss
from hpml.report.groups import Group
from hpml.report.studies.cells import (
    SPREAD,
    VERDICTS,
    ReadText,
    Table,
    batches,
    columns,
    median,
    pair,
    param,
    runs_cell,
    spread,
    timing,
)
from hpml.report.table import number

STEP = "prune"
PRUNED, UNPRUNED, FINAL = side(STEP, AFTER), side(STEP, BEFORE), side(STEP, "final")
LAYERS = "prune/layers.json"
ARCHITECTURE = {when: f"prune/architecture_{when}.txt" for when in SIDES}
TEXTS = (LAYERS, *ARCHITECTURE.values())  # the artifacts this table reads, when a run has them
# the loss a model family logs, by its LightningModule (``model._target_``); the classifiers'
# is the rest's
LOSSES = {"hpml.models.vae.VAEModule": "VAE: BCE + KL summed per sample"}
CROSS_ENTROPY = "cross-entropy, mean over samples"
# what the CSV shows before and after pruning: (column, metric)
MEASURED = [
    (f"{column}_{when}_{unit}", name(side(STEP, when)))
    for column, unit, name in (
        ("fwd_flops", "flops_per_sample", fwd_flops),
        ("size", "bytes", size),
        ("val_loss", "nats", val_loss),
    )
    for when in SIDES
]


def _widths(layers: str | None) -> str:
    """``fc1 400->80, fc21 20->8``: out-width of every pruned layer, from ``prune/layers.json``."""
    if not layers:
        return ""
    widths = json.loads(layers).get("widths", {})
    return ", ".join(f"{name} {a}->{b}" for name, (a, b) in sorted(widths.items()))


def _amount(group: Group) -> float:
    try:
        return float(param(group, "prune.amount"))
    except ValueError:
        return math.nan


def _losses(groups: list[Group]) -> str:
    """What the loss of the families in ``groups`` is: ``VAE: BCE + KL summed per sample``."""
    return "; ".join(
        sorted({LOSSES.get(param(g, "model._target_"), CROSS_ENTROPY) for g in groups})
    )


def pruning(groups: list[Group], text: ReadText) -> Table | None:
    """Study 3: one row per pruned group, by pruner and sparsity; ``text`` reads a run's
    artifacts (layer widths, ``print(model)``)."""
    pruned = [g for g in groups if any(fwd_flops(PRUNED) in r.data.metrics for r in g.runs)]
    if not pruned:
        return None
    pruned.sort(key=lambda g: (param(g, "prune.method"), _amount(g)))
    timed = batches(pruned, [STEP])
    rows, data, texts = [], [], []
    for group in pruned:
        shown, plain = timing(group, STEP, timed)
        rows.append(
            [
                ("prune.method", param(group, "prune.method")),
                ("sparsity asked (%)", number(100 * _amount(group))),
                ("runs (n, interval coverage)", runs_cell(group)),
                ("layer widths (out, before->after)", _widths(text(group.runs[0], LAYERS))),
                ("fwd FLOPs/sample (2 x MAC)", pair(group, fwd_flops(UNPRUNED), fwd_flops(PRUNED))),
                ("FLOPs reduction (x)", spread(group.values(FLOPS_REDUCTION))),
                ("size (bytes)", pair(group, size(UNPRUNED), size(PRUNED))),
                ("val loss (nats)", pair(group, val_loss(UNPRUNED), val_loss(PRUNED))),
                ("val loss after fine-tune (nats)", spread(group.values(val_loss(FINAL)))),
                *shown,
            ]
        )
        data.append(
            [
                ("runs", group.ids),
                ("prune.method", param(group, "prune.method")),
                ("prune.amount", _amount(group)),
                ("n", len(group.runs)),
                *((column, median(group, name)) for column, name in MEASURED),
                ("val_loss_final_nats", median(group, val_loss(FINAL))),
                *plain,
            ]
        )
        if after := text(group.runs[0], ARCHITECTURE[AFTER]):
            what = f"{param(group, 'prune.method')} at {param(group, 'prune.amount')}"
            texts.append((f"print(model) after pruning: {what} ({group.names})", after))
    before = next((t for g in pruned for r in g.runs if (t := text(r, ARCHITECTURE[BEFORE]))), None)
    if before:
        texts.insert(0, ("print(model) before pruning", before))
    headings, cells = columns(rows)
    return Table(
        "Pruning: pruner x sparsity",
        "FLOPs: forward, per sample, 2 x multiply-accumulates (counted by torch's FLOP "
        "counter on the model as it runs). Size: bytes of the saved state dict. Loss: the "
        f"model's validation loss in nats ({_losses(pruned)}), right after "
        "pruning and after the fine-tune epochs. Latency: median of timed forward passes at "
        "batch 1, ms (IQR over rounds where logged). FLOPs reduction: before / after. "
        f"{VERDICTS} {SPREAD}",
        headings,
        cells,
        texts,
        "pruning",
        columns(data),
    )
