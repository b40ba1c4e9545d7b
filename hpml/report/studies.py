"""The report's tables, from what hpml's callbacks logged: each only where runs carry it.

Repeats of one config (:mod:`hpml.report.groups`) collapse into one row: a number that varies
between them reads ``median [low, high]``, its order-statistic 95% interval (fewer than 6
repeats: [min, max], its own coverage said), and the row says its n. Every speed-up says its
interval and verdict. Study 3's table (pruner x sparsity: layer widths, FLOPs, size, losses,
latency, ``print(model)`` before and after) and study 1's (size, latency and quality before and
after quantisation, compilation and pruning); every caption states each number's convention.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hpml.analysis.stats import median_ci
from hpml.names import label
from hpml.report.comparisons import COLUMNS, Comparison
from hpml.report.groups import Group, plain
from hpml.report.table import number

if TYPE_CHECKING:
    from mlflow.entities import Run

# ``text(run, artifact path)``: an artifact's text, None when the run has none
ReadText = Callable[["Run", str], "str | None"]
# the batch-1 before/after columns both studies' CSV tables carry, in this order
B1_COLUMNS = (
    "latency_b1_before_ms",
    "latency_b1_after_ms",
    "speedup_b1_x",
    "speedup_b1_ci_low_x",
    "speedup_b1_ci_high_x",
    "speedup_b1_n",
    "speedup_b1_verdict",
)
SPREAD = (
    "A number that varies between a config's repeats is their median [low, high]: the "
    "order-statistic 95% interval of the median, or with fewer than 6 repeats [min, max], whose "
    "coverage the runs column says (75% for 3, 88% for 4, 94% for 5)."
)
VERDICTS = (
    "Speed-ups: before / after (> 1: faster), as the step timed both side by side in rounds: "
    "ratio [95% interval] verdict (n rounds); over repeats, the median of their speed-ups "
    "[interval over the repeats] (n repeats). Verdict: faster or slower when the interval lies "
    "above or below 1, within noise when it contains 1 or rests on one value; over repeats, "
    "faster or slower only when every repeat, timed side by side, said so. A run tagged "
    "hpml.noisy keeps its verdict (each round's load hit both sides and widened the "
    "interval) and its cell says so."
)


@dataclass(frozen=True)
class Table:
    """A report table with its conventions, and preformatted texts shown folded under it;
    ``name`` names its CSV (``tables/<name>.csv``), ``data`` its plain columns and rows there
    (default: the cells shown)."""

    title: str
    caption: str
    headings: list[str]
    rows: list[list[str]]
    texts: list[tuple[str, str]] = field(default_factory=list)  # (heading, text)
    name: str = ""
    data: tuple[list[str], list[list[object]]] | None = None


def spread(values: Sequence[float]) -> str:
    """A cell of a group's values: the value when they agree, else ``median [low, high]``."""
    if not values:
        return ""
    if len(set(values)) == 1:
        return number(values[0])
    ci = median_ci(values)
    return f"{number(ci.median)} [{number(ci.low)}, {number(ci.high)}]"


def runs_cell(group: Group) -> str:
    """``3 (75% intervals): job 0, job 3, job 6``: a row's n, the coverage of its intervals
    (set by n alone), and its runs."""
    n = len(group.runs)
    if n == 1:
        return group.names
    return f"{n} ({median_ci(list(range(n))).coverage:.0%} intervals): {group.names}"


def _values(group: Group, name: str) -> list[float]:
    return group.values(name)


def _pair(group: Group, before: str, after: str) -> str:
    b, a = _values(group, before), _values(group, after)
    if not b or not a:
        return ""
    return f"{spread(b)} -> {spread(a)}"


def _latency(group: Group, stage: str, batch: int = 1) -> list[str]:
    """Latency before and after, two cells: repeats' median [interval], or a single run's
    median with its IQR over rounds."""
    name = f"latency_b{batch}"
    sides = []
    for when in ("before", "after"):
        values = _values(group, f"{stage}_{when}/{name}_ms")
        iqr = group.runs[0].data.metrics.get(f"{stage}_{when}/{name}_iqr_ms")
        if len(values) == 1 and iqr is not None:
            sides.append(f"{number(values[0])} (IQR {number(iqr)})")
        else:
            sides.append(spread(values))
    return sides


def _speedups(group: Group, step: str) -> list[Comparison]:
    batches = sorted(b for s, b in group.in_run if s == step)
    return [c for b in batches if (c := group.speedup(step, b)) is not None]


def _batches(groups: list[Group], steps: Sequence[str]) -> list[int]:
    """The batch sizes any group timed a step's before/after at: a speed-up column each."""
    return sorted({b for g in groups for s, b in g.in_run if s in steps})


def _speedup_cells(found: list[Comparison], batches: list[int]) -> list[str]:
    by_batch = {c.batch: c.cell() for c in found}
    return [by_batch.get(b, "") for b in batches]


def _speedup_headings(batches: list[int]) -> list[str]:
    return [f"speed-up b{b} (x, before/after)" for b in batches]


def _widths(layers: str | None) -> str:
    """``fc1 400->80, fc21 20->8``: out-width of every pruned layer, from ``prune/layers.json``."""
    if not layers:
        return ""
    widths = json.loads(layers).get("widths", {})
    return ", ".join(f"{name} {a}->{b}" for name, (a, b) in sorted(widths.items()))


def _param(group: Group, key: str) -> str:
    return group.runs[0].data.params.get(key, "")


def _amount(group: Group) -> float:
    try:
        return float(_param(group, "prune.amount"))
    except ValueError:
        return math.nan


def _plain(group: Group, name: str) -> float | None:
    """A group's median of metric ``name`` for a CSV cell."""
    ci = group.interval(name)
    return None if ci is None else ci.median


def pruning(groups: list[Group], text: ReadText) -> Table | None:
    """Study 3: one row per pruned config (its repeats collapsed), by pruner and sparsity."""
    pruned = [
        g
        for g in groups
        if any("prune_after/fwd_flops_per_sample" in r.data.metrics for r in g.runs)
    ]
    if not pruned:
        return None
    pruned.sort(key=lambda g: (_param(g, "prune.method"), _amount(g)))
    batches = _batches(pruned, ["prune"])
    rows, plain, texts = [], [], []
    for group in pruned:
        speedups = _speedups(group, "prune")
        first = group.runs[0]
        rows.append(
            [
                _param(group, "prune.method"),
                number(100 * _amount(group)),
                runs_cell(group),
                _widths(text(first, "prune/layers.json")),
                _pair(
                    group, "prune_before/fwd_flops_per_sample", "prune_after/fwd_flops_per_sample"
                ),
                spread(_values(group, "prune/flops_reduction_x")),
                _pair(group, "prune_before/size_bytes", "prune_after/size_bytes"),
                _pair(group, "prune_before/val_loss_nats", "prune_after/val_loss_nats"),
                spread(_values(group, "prune_final/val_loss_nats")),
                *_latency(group, "prune"),
                *_speedup_cells(speedups, batches),
            ]
        )
        b1 = next((c for c in speedups if c.batch == 1), None)
        plain.append(
            [
                group.ids,
                _param(group, "prune.method"),
                _amount(group),
                len(group.runs),
                *(
                    _plain(group, n)
                    for n in (
                        "prune_before/fwd_flops_per_sample",
                        "prune_after/fwd_flops_per_sample",
                        "prune_before/size_bytes",
                        "prune_after/size_bytes",
                        "prune_before/val_loss_nats",
                        "prune_after/val_loss_nats",
                        "prune_final/val_loss_nats",
                        "prune_before/latency_b1_ms",
                        "prune_after/latency_b1_ms",
                    )
                ),
                *(
                    (None,) * 5
                    if b1 is None
                    else (b1.ratio, b1.ci_low, b1.ci_high, b1.n, b1.verdict)
                ),
            ]
        )
        after = text(first, "prune/architecture_after.txt")
        if after:
            what = f"{_param(group, 'prune.method')} at {_param(group, 'prune.amount')}"
            texts.append((f"print(model) after pruning: {what} ({group.names})", after))
    before = next(
        (t for g in pruned for r in g.runs if (t := text(r, "prune/architecture_before.txt"))),
        None,
    )
    if before:
        texts.insert(0, ("print(model) before pruning", before))
    return Table(
        "Pruning: pruner x sparsity",
        "FLOPs: forward, per sample, 2 x multiply-accumulates (counted by torch's FLOP "
        "counter on the model as it runs). Size: bytes of the saved state dict. Loss: the "
        "model's validation loss in nats (VAE: BCE + KL summed per sample), right after "
        "pruning and after the fine-tune epochs. Latency: median of timed forward passes at "
        "batch 1, ms (IQR over rounds where logged). FLOPs reduction: before / after. "
        f"{VERDICTS} {SPREAD}",
        [
            "prune.method",
            "sparsity asked (%)",
            "runs (n, interval coverage)",
            "layer widths (out, before->after)",
            "fwd FLOPs/sample (2 x MAC)",
            "FLOPs reduction (x)",
            "size (bytes)",
            "val loss (nats)",
            "val loss after fine-tune (nats)",
            "latency b1 before (ms)",
            "latency b1 after (ms)",
            *_speedup_headings(batches),
        ],
        rows,
        texts,
        "pruning",
        (
            [
                "runs",
                "prune.method",
                "prune.amount",
                "n",
                "fwd_flops_before_flops_per_sample",
                "fwd_flops_after_flops_per_sample",
                "size_before_bytes",
                "size_after_bytes",
                "val_loss_before_nats",
                "val_loss_after_nats",
                "val_loss_final_nats",
                *B1_COLUMNS,
            ],
            plain,
        ),
    )


STEPS = ("prune", "quant", "compile")


def before_after(groups: list[Group], text: ReadText) -> Table | None:
    """Study 1: every variant a config measured before and after pruning, quantisation or
    compilation: size, latency with the speed-up's verdict, and validation quality."""
    rows, plain = [], []
    steps = [
        s
        for s in STEPS
        if any(f"{s}_after/size_bytes" in r.data.metrics for g in groups for r in g.runs)
    ]
    if steps == ["prune"]:
        return None  # a pruning sweep alone: the pruning table says it all
    batches = _batches(groups, steps)
    for group in groups:
        metrics = {n for r in group.runs for n in r.data.metrics}
        for step in steps:
            b, a = f"{step}_before", f"{step}_after"
            if f"{a}/size_bytes" not in metrics:
                continue
            quality = "val_acc_pct" if f"{a}/val_acc_pct" in metrics else "val_loss_nats"
            speedups = _speedups(group, step)
            rows.append(
                [
                    runs_cell(group),
                    f"{step}: {_param(group, f'{step}.method')}",
                    _pair(group, f"{b}/size_bytes", f"{a}/size_bytes"),
                    *_latency(group, step),
                    *_speedup_cells(speedups, batches),
                    _pair(group, f"{b}/{quality}", f"{a}/{quality}"),
                    quality.replace("val_", "val ")
                    .replace("_pct", " (%)")
                    .replace("_nats", " (nats)"),
                ]
            )
            b1 = next((c for c in speedups if c.batch == 1), None)
            plain.append(
                [
                    group.ids,
                    step,
                    _param(group, f"{step}.method"),
                    len(group.runs),
                    _plain(group, f"{b}/size_bytes"),
                    _plain(group, f"{a}/size_bytes"),
                    _plain(group, f"{b}/latency_b1_ms"),
                    _plain(group, f"{a}/latency_b1_ms"),
                    *(
                        (None,) * 5
                        if b1 is None
                        else (b1.ratio, b1.ci_low, b1.ci_high, b1.n, b1.verdict)
                    ),
                    f"{b}/{quality}",
                    _plain(group, f"{b}/{quality}"),
                    _plain(group, f"{a}/{quality}"),
                ]
            )
    if not rows:
        return None
    return Table(
        "Before and after each optimisation",
        "Size: bytes of the saved state dict (the int8 model's own for quantisation). Latency: "
        "median of timed forward passes at batch 1, ms, on the device the variant runs on "
        "(IQR over rounds where logged). Quality: the model's validation accuracy (%) or loss "
        "(nats), on the validation split or its first prune/quant/compile.eval_batches "
        f"batches. {VERDICTS} {SPREAD}",
        [
            "runs (n, interval coverage)",
            "step",
            "size (bytes)",
            "latency b1 before (ms)",
            "latency b1 after (ms)",
            *_speedup_headings(batches),
            "quality",
            "quality is",
        ],
        rows,
        name="before_after",
        data=(
            [
                "runs",
                "step",
                "method",
                "n",
                "size_before_bytes",
                "size_after_bytes",
                *B1_COLUMNS,
                "quality_measure",
                "quality_before",
                "quality_after",
            ],
            plain,
        ),
    )


def repeats(groups: list[Group], columns: list[str]) -> Table | None:
    """One row per config repeated more than once: each metric column's median [interval]."""
    repeated = [g for g in groups if len(g.runs) > 1]
    if not repeated:
        return None
    shown = [c for c in columns if any(g.values(c) for g in repeated)]
    rows, plain = [], []
    for group in repeated:
        rows.append([group.label, runs_cell(group), *(spread(group.values(c)) for c in shown)])
        cells: list[object] = [group.label, group.ids, len(group.runs)]
        for c in shown:
            ci = group.interval(c)
            cells += [None] * 4 if ci is None else [ci.median, ci.low, ci.high, ci.n]
        plain.append(cells)
    return Table(
        "Repeats: median and interval per config",
        f"A row per config run more than once (runs differing only in replicate, or seed unless "
        f"the report was made --by-seed). {SPREAD}",
        ["config", "runs (n, interval coverage)", *(label(c) for c in shown)],
        rows,
        name="repeats",
        data=(
            [
                "config",
                "runs",
                "n",
                *(f"{c}{s}" for c in shown for s in ("", " ci_low", " ci_high", " n")),
            ],
            plain,
        ),
    )


def against_baseline(comparisons: list[Comparison], base: Group | None) -> Table | None:
    """Every config's speed against the baseline config's, with interval and verdict."""
    if not comparisons or base is None:
        return None
    rows = [
        [
            c.comparison.split(" vs baseline ", 1)[0],
            label(c.measure),
            number(c.before) if c.before is not None else "",
            number(c.after) if c.after is not None else "",
            c.cell(),
        ]
        for c in comparisons
    ]
    rule = (
        "the first config that prunes, quantises and compiles nothing"
        if plain(base)
        else "the sweep's first config (each config prunes, quantises or compiles)"
    )
    return Table(
        "Each config against the baseline",
        f"Baseline: {base.label} ({base.names}), {rule}. Speed-up: the config's throughput / the "
        "baseline's, or the baseline's step time or latency / the config's (> 1: the config is "
        "faster): the ratio of the two groups' medians [95% bootstrap interval over their "
        "repeats] verdict (n: the smaller group's runs). Faster or slower when the interval "
        "lies above or below 1; within noise when it contains 1, a side has one run (separate "
        "runs are not timed side by side: repeat them with replicate=0,1,2), or a run was "
        "tagged hpml.noisy.",
        ["config", "measure", "baseline (median)", "config (median)", "speed-up (x)"],
        rows,
        name="baseline",
        data=(list(COLUMNS), [c.row() for c in comparisons]),
    )


TABLES = (pruning, before_after)
