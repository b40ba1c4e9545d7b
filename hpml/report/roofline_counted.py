"""The counted beside the analytic: a run whose kernels Nsight Compute counted
(``python -m hpml.profile.ncu``) has a second point, its forward kernels' FLOPs over the DRAM
bytes they moved, and that point's intensity decides whether the run is memory- or
compute-bound. A table compares the counts with the analytic ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpml.names import (
    BYTES,
    BYTES_PER_SAMPLE,
    FLOPS,
    FWD_FLOPS_PER_SAMPLE,
    INTENSITY,
    NCU_CACHE_TAG,
    NCU_CLOCK_TAG,
    NCU_COUNTERS_TAG,
    NCU_DEVICE_TAG,
    NCU_REGIONS,
    NCU_STEP_TAG,
    NCU_TENSOR_TAG,
    S,
    human,
    ncu,
)

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.analysis.roofline import RooflinePoint

FWD, BWD = NCU_REGIONS["hpml/forward"], NCU_REGIONS["hpml/backward"]
COUNTED_FLOPS, COUNTED_BYTES = ncu(FWD, "", FLOPS), ncu(FWD, "dram", BYTES)
COUNTED_SECONDS = ncu(FWD, "kernel_time", S)
BASIS = "forward kernels, counted"
# counted FLOPs under this share of the analytic count: the kernels did fewer multiplies
FEWER = 0.95
WINOGRAD = "fewer multiplies than a direct convolution: cuDNN's Winograd or FFT algorithms"
ANALYTIC = (
    "intensity: analytic (FLOPs over the least bytes each layer must move); no run has GPU "
    "counters (python -m hpml.profile.ncu counts them)"
)


def has_counts(run: Run) -> bool:
    """Whether Nsight Compute counted the run's forward kernels."""
    return COUNTED_FLOPS in run.data.metrics and COUNTED_BYTES in run.data.metrics


def counted_point(run: Run, label: str) -> tuple[RooflinePoint, str]:
    """The run's counted point: its forward kernels' FLOPs and DRAM bytes, timed by the
    kernels' own durations under ncu where those were read."""
    from hpml.analysis.roofline import RooflinePoint

    m = run.data.metrics
    seconds = m.get(COUNTED_SECONDS) or None
    point = RooflinePoint(label, m[COUNTED_FLOPS], m[COUNTED_BYTES], seconds, counted=True)
    return point, BASIS + ("" if seconds else ", not timed")


def analytic_step(run: Run) -> tuple[float, float] | None:
    """The analytic FLOPs and least bytes of the counted step's forward pass (per sample x
    ``data.batch_size``), None without the batch size."""
    batch = run.data.params.get("data.batch_size", "")
    if not batch.isdigit():
        return None
    m = run.data.metrics
    return m[FWD_FLOPS_PER_SAMPLE] * int(batch), m[BYTES_PER_SAMPLE] * int(batch)


def _both(run: Run) -> str:
    """The counted intensity of forward and backward together, or ``-`` without backward."""
    m = run.data.metrics
    flops, nbytes = ncu(BWD, "", FLOPS), ncu(BWD, "dram", BYTES)
    if flops not in m or not m.get(nbytes):
        return "-"
    return f"{(m[COUNTED_FLOPS] + m[flops]) / (m[COUNTED_BYTES] + m[nbytes]):.3g}"


def _ratio(counted: float, analytic: float | None) -> str:
    return "-" if not analytic else f"{counted / analytic:.2f}x"


def table(runs: list[Run], labels: list[str]) -> str:
    """The counted runs against their analytic counts, notes on what differs and why, and the
    counters read; for no counted run, the one line saying the intensities are analytic."""
    counted = [(r, label) for r, label in zip(runs, labels, strict=True) if has_counts(r)]
    if not counted:
        return ANALYTIC
    header = (
        f"{'run':<32} {'point':<16} {'FLOP/byte':>9} {'analytic':>8} {'fwd+bwd':>7} "
        f"{'FLOPs':>10} {'/analytic':>9} {'DRAM':>9} {'/least':>7}  {'step':<8} cache, clocks"
    )
    lines = [
        "counted by Nsight Compute: each run's forward kernels of one training step (FLOPs = "
        "add + mul + 2 x FMA, and tensor-core work where its FLOPs per unit are known; DRAM "
        "bytes read + written), against the analytic count and least bytes",
        header,
        "-" * len(header),
    ]
    notes = []
    for run, label in counted:
        m, tags = run.data.metrics, run.data.tags
        flops, nbytes = m[COUNTED_FLOPS], m[COUNTED_BYTES]
        a_flops, a_bytes = analytic_step(run) or (None, None)
        intensity = flops / nbytes if nbytes else 0.0
        lines.append(
            f"{run.info.run_id:<32} {label[:16]:<16} {intensity:>9.3g} {m[INTENSITY]:>8.3g} "
            f"{_both(run):>7} {human(flops, 'FLOP'):>10} {_ratio(flops, a_flops):>9} "
            f"{human(nbytes):>9} {_ratio(nbytes, a_bytes):>7}  "
            f"{tags.get(NCU_STEP_TAG, '?'):<8} {tags.get(NCU_CACHE_TAG, '?')}, "
            f"{tags.get(NCU_CLOCK_TAG, '?')}"
        )
        unknown = tags.get(NCU_TENSOR_TAG, "none")
        if unknown != "none":
            notes.append(
                f"{label}: tensor-core work on {unknown} has no known FLOPs per unit on "
                f"{tags.get(NCU_DEVICE_TAG, 'its device')}: left out, the FLOPs are a lower bound"
            )
        elif a_flops and flops < FEWER * a_flops:
            notes.append(f"{label}: {flops / a_flops:.2f}x the analytic FLOPs, {WINOGRAD}")
    lines += [f"  note: {note}" for note in notes]
    read = {run.data.tags.get(NCU_COUNTERS_TAG, "?") for run, _ in counted}
    if len(read) == 1:
        lines.append(f"counters read: {', '.join(next(iter(read)).split(','))}")
    else:
        for run, label in counted:
            counters = run.data.tags.get(NCU_COUNTERS_TAG, "?").split(",")
            lines.append(f"counters read for {label}: {', '.join(counters)}")
    return "\n".join(lines)


def verdict_rows(
    runs: list[Run], rows: list[tuple[RooflinePoint, str]]
) -> list[tuple[RooflinePoint, str]]:
    """Each run's row of the roofline table: its counted point where it has one (whose
    intensity decides the bound), else its analytic one."""
    return [
        counted_point(run, row[0].label) if has_counts(run) else row
        for run, row in zip(runs, rows, strict=True)
    ]


def with_counted(
    runs: list[Run], rows: list[tuple[RooflinePoint, str]]
) -> tuple[list[tuple[RooflinePoint, str]], list[Run], dict[int, int]]:
    """The points to draw: the runs' analytic ones, then each counted run's counted one; the
    run of each point; and the counted twin of each analytic point that has one, by index."""
    drawn, owners, twins = list(rows), list(runs), {}
    for index, (run, (point, _)) in enumerate(zip(runs, rows, strict=True)):
        if has_counts(run):
            twins[index] = len(drawn)
            drawn.append(counted_point(run, point.label))
            owners.append(run)
    return drawn, owners, twins


def caption(twins: dict[int, int]) -> str:
    """What the figure's caption says of its points' intensities."""
    if not twins:
        return " Intensities are analytic: FLOPs over the least bytes each layer must move."
    return (
        " Diamonds: a run's forward kernels as Nsight Compute counted them (FLOPs over the DRAM "
        "bytes moved, at the kernels' own FLOP/s under ncu), which decide its bound; each is "
        "joined to the run's analytic point (grey: FLOPs over the least bytes each layer must "
        "move). Circles in colour: runs without counters, analytic."
    )
