"""The GPU check's rows of what ``make bench`` measured there: each ratio with its interval, n
and verdict as the bench wrote it (``.bench/results/<case>.json``), and the fused and optimised
runs beside them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpml.gpu.rows import Row, Store, comparisons, ran


def bench_results(store: Store, case: str) -> dict[str, Any] | None:
    """Bench ``case``'s results JSON as this check wrote it; None if absent or an earlier one."""
    file = Path(store.bench) / f"{case}.json"
    if not file.is_file() or file.stat().st_mtime < store.since:
        return None
    return json.loads(file.read_text())


def bench_row(store: Store, case: str, path: str, keep: Callable[[str], object]) -> Row:
    """A row of the ratios of bench ``case`` (its results JSON) whose metric ``keep`` picks,
    each as ``metric ratio [low, high] (n, coverage, verdict)`` with its goal where it has one."""
    results = bench_results(store, case)
    if results is None:
        return Row(path, "no", "no results written")
    found = []
    for r in results["ratios"]:
        if not keep(r["metric"]):
            continue
        goal = (
            ""
            if r["goal"] is None
            else f", goal {r['goal']:g}: {'met' if r['meets_goal'] else 'not met'}"
        )
        found.append(
            f"{r['metric']}: {r['median']:.2f}x [{r['ci_low']:.2f}, {r['ci_high']:.2f}] "
            f"(n={len(r['values'])}, {r['ci_coverage']:.0%} interval, {r['verdict']}{goal})"
        )
    return Row(path, "yes" if found else "no", "; ".join(found) or "no ratio written")


def overhead_rows(store: Store) -> list[Row]:
    """hpml.train against the bare loop per configuration, and what hpml's own work costs a
    step (the bench's ``overhead_us_per_step`` note)."""
    row = bench_row(store, "overhead", "hpml.train / bare loop (bench overhead)", lambda m: True)
    results = bench_results(store, "overhead") or {}
    costs = (results.get("notes") or {}).get("overhead_us_per_step") or {}
    cost = "; ".join(f"{name}: {us:,.0f} us a step" for name, us in costs.items())
    return [row, Row("hpml's own work per step (bench overhead)", "yes" if cost else "no", cost)]


def speed_rows(store: Store) -> list[Row]:
    path = "AMP, channels_last, compiled, CUDA graphs against eager (bench train_speed)"
    return [bench_row(store, "train_speed", path, lambda metric: "speed-up" in metric)]


def prune_rows(store: Store) -> list[Row]:
    path = "pruned against unpruned latency, exact and rounded widths (bench prune)"
    return [bench_row(store, "prune", path, lambda metric: "speedup" in metric)]


def fused_rows(store: Store) -> list[Row]:
    """Whether a sweep trained fused on CUDA, and the bench's fused/serial curve over N."""
    runs = store.of("gpu_fused")
    fused = [r for r in runs if r.data.tags.get("hpml.fused") == "true"]
    size = fused[0].data.tags.get("hpml.fused.array_size", "?") if fused else "-"
    return [
        Row(
            "fuse=array on CUDA (no force)",
            "yes" if fused else "no",
            f"{len(fused)} of {len(runs)} runs trained fused, array size {size}",
        ),
        bench_row(store, "fuse", "fused vs serial over N (bench fuse)", re.compile("N=").search),
    ]


def optimise_rows(store: Store) -> list[Row]:
    """Each prune, quant and compile run's before/after comparisons on CUDA."""
    rows = []
    for run in store.of("gpu_optimise"):
        t = run.data.tags
        choice = next(
            (
                f"{g}={t[f'hpml.choice.{g}']}"
                for g in ("prune", "quant", "compile")
                if t.get(f"hpml.choice.{g}", "none") != "none"
            ),
            "none",
        )
        found = comparisons(run.data.metrics, t)
        rows.append(Row(f"optimise {choice}", ran(run), "; ".join(found) or "no comparison"))
    return rows
