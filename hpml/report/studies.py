"""The studies' headline tables, from what hpml's callbacks logged: each only where runs carry it.

Study 3's (pruner x sparsity: layer widths, FLOPs, size, losses, latency, ``print(model)``
before and after) and study 1's (size, latency and quality before and after quantisation,
compilation and pruning). Every caption states the convention of each number.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hpml.report.figures import VARIANTS
from hpml.report.table import number, short_name

if TYPE_CHECKING:
    from mlflow.entities import Run

# ``text(run, artifact path)``: an artifact's text, None when the run has none
ReadText = Callable[["Run", str], "str | None"]


@dataclass(frozen=True)
class Table:
    """A report table with its conventions, and preformatted texts shown folded under it."""

    title: str
    caption: str
    headings: list[str]
    rows: list[list[str]]
    texts: list[tuple[str, str]] = field(default_factory=list)  # (heading, text)


def _pair(metrics: dict[str, float], before: str, after: str) -> str:
    if before not in metrics or after not in metrics:
        return ""
    return f"{number(metrics[before])} -> {number(metrics[after])}"


def _widths(layers: str | None) -> str:
    """``fc1 400->80, fc21 20->8``: out-width of every pruned layer, from ``prune/layers.json``."""
    if not layers:
        return ""
    widths = json.loads(layers).get("widths", {})
    return ", ".join(f"{name} {a}->{b}" for name, (a, b) in sorted(widths.items()))


def pruning(runs: list[Run], text: ReadText) -> Table | None:
    """Study 3: one row per pruned run, by pruner and sparsity."""
    pruned = [r for r in runs if "prune_after/fwd_flops_per_sample" in r.data.metrics]
    if not pruned:
        return None
    pruned.sort(
        key=lambda r: (r.data.params.get("prune.method", ""), r.data.params.get("prune.amount", ""))
    )
    rows, texts = [], []
    for run in pruned:
        m, p = run.data.metrics, run.data.params
        rows.append(
            [
                p.get("prune.method", ""),
                number(100 * float(p.get("prune.amount", "nan"))),
                _widths(text(run, "prune/layers.json")),
                _pair(m, "prune_before/fwd_flops_per_sample", "prune_after/fwd_flops_per_sample"),
                number(m["prune/flops_reduction_x"]) if "prune/flops_reduction_x" in m else "",
                _pair(m, "prune_before/size_bytes", "prune_after/size_bytes"),
                _pair(m, "prune_before/val_loss_nats", "prune_after/val_loss_nats"),
                number(m["prune_final/val_loss_nats"]) if "prune_final/val_loss_nats" in m else "",
                _pair(m, "prune_before/latency_b1_ms", "prune_after/latency_b1_ms"),
                number(m["prune/speedup_b1_x"]) if "prune/speedup_b1_x" in m else "",
            ]
        )
        after = text(run, "prune/architecture_after.txt")
        if after:
            what = f"{p.get('prune.method')} at {p.get('prune.amount')}"
            texts.append((f"print(model) after pruning: {what} ({short_name(run)})", after))
    before = next((t for r in pruned if (t := text(r, "prune/architecture_before.txt"))), None)
    if before:
        texts.insert(0, ("print(model) before pruning", before))
    return Table(
        "Pruning: pruner x sparsity (study 3)",
        "FLOPs: forward, per sample, 2 x multiply-accumulates (counted by torch's FLOP "
        "counter on the model as it runs). Size: bytes of the saved state dict. Loss: the "
        "model's validation loss in nats (VAE: BCE + KL summed per sample), right after "
        "pruning and after the fine-tune epochs. Latency: median of timed forward passes at "
        "batch 1, ms. Reductions and speed-up: before / after.",
        [
            "prune.method",
            "sparsity asked (%)",
            "layer widths (out, before->after)",
            "fwd FLOPs/sample (2 x MAC)",
            "FLOPs reduction (x)",
            "size (bytes)",
            "val loss (nats)",
            "val loss after fine-tune (nats)",
            "latency b1 (ms)",
            "speed-up b1 (x)",
        ],
        rows,
        texts,
    )


def before_after(runs: list[Run], text: ReadText) -> Table | None:
    """Study 1: every variant a run measured before and after pruning, quantisation or
    compilation: size, latency and validation quality."""
    rows = []
    steps = [s for s in VARIANTS if any(f"{s}_after/size_bytes" in r.data.metrics for r in runs)]
    if steps == ["prune"]:
        return None  # a pruning sweep alone: the pruning table says it all
    for run in runs:
        m = run.data.metrics
        for step in steps:
            b, a = f"{step}_before", f"{step}_after"
            if f"{a}/size_bytes" not in m:
                continue
            quality = "val_acc_pct" if f"{a}/val_acc_pct" in m else "val_loss_nats"
            method = run.data.params.get(f"{step}.method", "")
            rows.append(
                [
                    short_name(run),
                    f"{step}: {method}",
                    _pair(m, f"{b}/size_bytes", f"{a}/size_bytes"),
                    _pair(m, f"{b}/latency_b1_ms", f"{a}/latency_b1_ms"),
                    _pair(m, f"{b}/{quality}", f"{a}/{quality}"),
                    quality.replace("val_", "val ")
                    .replace("_pct", " (%)")
                    .replace("_nats", " (nats)"),
                ]
            )
    if not rows:
        return None
    return Table(
        "Before and after each optimisation (study 1)",
        "Size: bytes of the saved state dict (the int8 model's own for quantisation). Latency: "
        "median of timed forward passes at batch 1, ms, on the device the variant runs on. "
        "Quality: the model's validation accuracy (%) or loss (nats), on the validation split "
        "or its first prune/quant/compile.eval_batches batches.",
        ["run", "step", "size (bytes)", "latency b1 (ms)", "quality", "quality is"],
        rows,
    )


TABLES = (pruning, before_after)
