"""Study 1's table: size, latency and quality of every variant a config measured before and
after quantisation, compilation and pruning, with each speed-up's verdict."""

from __future__ import annotations

from hpml.names import AFTER, BEFORE, side, size, val_acc, val_loss
from hpml.report.groups import STEPS, Group
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
    timing,
)


def before_after(groups: list[Group], _: ReadText) -> Table | None:
    """Study 1: every variant a config measured before and after an optimisation step."""
    steps = [
        s
        for s in STEPS
        if any(size(side(s, AFTER)) in r.data.metrics for g in groups for r in g.runs)
    ]
    if steps == ["prune"]:
        return None  # a pruning sweep alone: the pruning table says it all
    timed = batches(groups, steps)
    rows, data = [], []
    for group in groups:
        metrics = {n for r in group.runs for n in r.data.metrics}
        for step in steps:
            b, a = side(step, BEFORE), side(step, AFTER)
            if size(a) not in metrics:
                continue
            quality, words = (
                (val_acc, "val acc (%)") if val_acc(a) in metrics else (val_loss, "val loss (nats)")
            )
            shown, plain = timing(group, step, timed)
            rows.append(
                [
                    ("runs (n, interval coverage)", runs_cell(group)),
                    ("step", f"{step}: {param(group, f'{step}.method')}"),
                    ("size (bytes)", pair(group, size(b), size(a))),
                    *shown,
                    ("quality", pair(group, quality(b), quality(a))),
                    ("quality is", words),
                ]
            )
            data.append(
                [
                    ("runs", group.ids),
                    ("step", step),
                    ("method", param(group, f"{step}.method")),
                    ("n", len(group.runs)),
                    ("size_before_bytes", median(group, size(b))),
                    ("size_after_bytes", median(group, size(a))),
                    *plain,
                    ("quality_measure", quality(b)),
                    ("quality_before", median(group, quality(b))),
                    ("quality_after", median(group, quality(a))),
                ]
            )
    if not rows:
        return None
    headings, cells = columns(rows)
    return Table(
        "Before and after each optimisation",
        "Size: bytes of the saved state dict (the int8 model's own for quantisation). Latency: "
        "median of timed forward passes at batch 1, ms, on the device the variant runs on "
        "(IQR over rounds where logged). Quality: the model's validation accuracy (%) or loss "
        "(nats), on the validation split or its first prune/quant/compile.eval_batches "
        f"batches. {VERDICTS} {SPREAD}",
        headings,
        cells,
        name="before_after",
        data=columns(data),
    )
