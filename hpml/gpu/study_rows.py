"""The GPU check's rows of the studies it runs: study 2's time shares, study 5's roofline, and
its step as Nsight Compute counted it, beside the analytic figures."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hpml.gpu.rows import Row, Store, number, ran, tflops
from hpml.names import (
    BYTES,
    FLOP_PER_BYTE,
    FLOPS,
    FORWARD_ACHIEVED,
    INTENSITY,
    NCU_CACHE_TAG,
    NCU_CLOCK_TAG,
    PCT,
    PEAK_BANDWIDTH,
    RIDGE,
    S,
    metric,
    ncu,
)


def counted_rows(store: Store) -> list[Row]:
    """Study 5's VGGs as Nsight Compute counted a training step's forward: intensity and
    FLOP/s beside the analytic ones, with the cache and clock control used."""
    rows = []
    for run in store.of("gpu_counted"):
        m, t = run.data.metrics, run.data.tags
        counted = m.get(ncu("fwd", "intensity", FLOP_PER_BYTE))
        flops, seconds = m.get(ncu("fwd", "", FLOPS)), m.get(ncu("fwd", "kernel_time", S))
        rate = flops / seconds if flops is not None and seconds else None
        rows.append(
            Row(
                f"counted roofline, {t.get('hpml.choice.model', '?')}",
                "yes" if counted is not None else ran(run),
                f"counted {number(counted, '.1f', ' FLOP/B')} at "
                f"{tflops(rate)} (its kernels' time), analytic "
                f"{number(m.get(INTENSITY), '.1f', ' FLOP/B')}; DRAM "
                f"{number(m.get(ncu('fwd', 'dram', BYTES)), ',.0f', ' bytes')}; cache "
                f"{t.get(NCU_CACHE_TAG, '?')}, clock {t.get(NCU_CLOCK_TAG, '?')}",
            )
        )
    drawn = "roofline" in store.outputs.get("counted", "")
    rows.append(Row("counted roofline plot", "yes" if drawn else "no", "VGG11/13/19, both points"))
    return rows


def _shares(runs: Iterable[Any], category: str) -> dict[tuple[str, int], float]:
    return {
        (
            r.data.params.get("model.name", r.data.tags.get("hpml.choice.model", "?")),
            int(r.data.params.get("data.batch_size", 0)),
        ): r.data.metrics[metric("profile", category, PCT)]
        for r in runs
        if metric("profile", category, PCT) in r.data.metrics
    }


def study2_rows(store: Store) -> list[Row]:
    runs = store.of("gpu_study2")
    rows = []
    copy, kernel = _shares(runs, "memcpy"), _shares(runs, "kernel")
    for model in sorted({m for m, _ in kernel}):
        sizes = sorted(b for m, b in kernel if m == model)
        text = ", ".join(
            f"b{b}: kernel {kernel[(model, b)]:.1f}% memcpy {copy.get((model, b), 0):.1f}%"
            for b in sizes
        )
        falls = len(sizes) > 1 and copy.get((model, sizes[-1]), 0) < copy.get((model, sizes[0]), 0)
        rows.append(
            Row(
                f"study 2 execution summary, {model}",
                "yes",
                f"{text}; memcpy share {'falls' if falls else 'does not fall'} "
                f"from b{sizes[0]} to b{sizes[-1]}",
            )
        )
    if not rows:
        rows.append(Row("study 2 execution summary", "failed", "no profiled run logged"))
    failed = sum(r.info.status != "FINISHED" for r in runs)
    report = store.outputs.get("study2", "")
    rows.append(
        Row(
            "study 2 report (time-share plot)",
            "yes" if "report.html" in report else "no",
            f"{len(runs)} runs, {failed} failed",
        )
    )
    return rows


def roofline_rows(store: Store) -> list[Row]:
    rows = []
    for run in store.of("gpu_study5"):
        names = (INTENSITY, FORWARD_ACHIEVED, RIDGE, PEAK_BANDWIDTH)
        if any(name not in run.data.metrics for name in names):
            rows.append(Row(f"study 5 roofline, {run.info.run_name}", "failed", "no roofline"))
            continue
        intensity, achieved, ridge, bandwidth = (run.data.metrics[name] for name in names)
        roof = min(ridge, intensity) * bandwidth  # the precision's compute roof, or the slope
        where = "above the roof" if achieved > roof * (1 + 1e-9) else "under the roof"
        rows.append(
            Row(
                f"study 5 roofline, {run.data.tags.get('hpml.choice.model', '?')}",
                "yes",
                f"{intensity:.1f} FLOP/B at {achieved / 1e12:.2f} TFLOP/s, roof {roof / 1e12:.2f} "
                f"TFLOP/s ({where})",
            )
        )
    drawn = "roofline.png" in store.outputs.get("study5", "")
    rows.append(Row("study 5 roofline plot", "yes" if drawn else "no", "one roofline, three VGGs"))
    return rows
