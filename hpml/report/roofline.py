"""``python -m hpml.report.roofline``: MLflow runs on one roofline, each memory- or compute-bound.

A run's point is its arithmetic intensity (``hpml.callbacks.roofline``) against its achieved
training FLOP/s (fwd+bwd FLOPs per sample x samples/s; else its timed forward pass). A run whose
kernels Nsight Compute counted has its counted point beside it (``roofline_counted``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpml import garbage, names
from hpml.analysis.devices import (
    KNOWN_DEVICES,
    PRECISIONS,
    DevicePeak,
    default_device,
    match_device_name,
)
from hpml.errors import HpmlError
from hpml.names import (
    BYTES_PER_SAMPLE,
    FORWARD_ACHIEVED,
    FWD_BWD_FLOPS_PER_SAMPLE,
    FWD_FLOPS_PER_SAMPLE,
    INTENSITY,
    PEAK_BANDWIDTH,
    PEAK_FP32,
    PEAK_SOURCE_TAG,
    PEAK_TAG,
    STAGE,
    THROUGHPUT,
)
from hpml.report.canvas import Canvas, Figure, distinct_labels, fit, run_label
from hpml.report.roofline_counted import caption, verdict_rows, with_counted
from hpml.report.roofline_counted import table as counted_table
from hpml.report.runs import add_run_choice, default_tracking_uri, peak_cache_dir, project_root
from hpml.report.table import differing_keys

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.analysis.roofline import RooflinePoint


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hpml.report.roofline",
        description="Draw MLflow runs (a sweep, or chosen runs) on one roofline: intensity "
        "(FLOP/byte) against achieved FLOP/s, each point memory- or compute-bound. "
        "Runs need the roofline callback (callbacks/roofline.yaml).",
    )
    add_run_choice(parser)
    parser.add_argument(
        "--device",
        choices=[*KNOWN_DEVICES, "measured"],
        help="roof to draw (default: the datasheet of the GPU the runs ran on "
        "(tag hpml.device), else the peak the runs measured; 'measured' "
        "measures this machine)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where roofline.png/.svg go (default: "
        "<HPML_ROOT or cwd>/outputs/roofline/<sweep or first run id>)",
    )
    return parser.parse_args(argv)


def points(runs: list[Run]) -> list[tuple[RooflinePoint, str]]:
    """Each run's point, labelled by its model choice (where that would not tell runs apart,
    its values of the keys that differ between them, fitted), and what its performance is."""
    chosen = [r.data.tags.get(names.choice_tag("model")) or str(r.info.run_name) for r in runs]
    if len(set(chosen)) < len(chosen):
        chosen = distinct_labels(runs, differing_keys(runs))
    return [run_point(run, fit(name)) for run, name in zip(runs, chosen, strict=True)]


def run_point(run: Run, label: str) -> tuple[RooflinePoint, str]:
    """A run's point and what its performance is: training (fwd+bwd) or timed forward pass."""
    from hpml.analysis.roofline import RooflinePoint

    m = run.data.metrics
    intensity = m[INTENSITY]
    if FWD_BWD_FLOPS_PER_SAMPLE in m and m.get(THROUGHPUT):
        flops, basis, seconds = m[FWD_BWD_FLOPS_PER_SAMPLE], "train fwd+bwd", 1 / m[THROUGHPUT]
    elif m.get(FORWARD_ACHIEVED):
        flops, basis = m[FWD_FLOPS_PER_SAMPLE], "forward"
        seconds = flops / m[FORWARD_ACHIEVED]
    else:
        flops, basis, seconds = m[FWD_FLOPS_PER_SAMPLE], "not timed", None
    nbytes = flops / intensity if intensity else m[BYTES_PER_SAMPLE]
    return RooflinePoint(label, flops, nbytes, seconds), basis


def run_peak(run: Run) -> DevicePeak | None:
    """The roof of the run's own device: the datasheet of its GPU, else the roof its callback
    used, from its metrics and tags."""
    m, tags = run.data.metrics, run.data.tags
    kind, _, name = tags.get(names.DEVICE_TAG, "").partition(": ")
    if kind == "cuda" and (found := match_device_name(name)) is not None:
        return found
    if PEAK_FP32 not in m or PEAK_BANDWIDTH not in m:
        return None
    return DevicePeak(
        tags.get(PEAK_TAG, "device of run " + run.info.run_id[:8]),
        m[PEAK_FP32],
        None,
        None,
        None,
        m[PEAK_BANDWIDTH],
        tags.get(PEAK_SOURCE_TAG, f"logged by run {run.info.run_id}"),
    )


def choose_peak(choice: str | None, runs: list[Run]) -> DevicePeak:
    """``--device``, else the first run's GPU in the table, its logged peak, or this machine's."""
    from hpml.analysis.measured_peak import resolve_peak

    if choice is None:
        devices = sorted({r.data.tags.get(names.DEVICE_TAG, "?") for r in runs})
        if len(devices) > 1:
            print(
                f"hpml: note: the runs ran on {len(devices)} devices ({'; '.join(devices)}); "
                "drawing the first run's roof",
                file=sys.stderr,
            )
        if (found := run_peak(runs[0])) is not None:
            return found
    return resolve_peak(choice or "measured", default_device(), peak_cache_dir())


def run_precision(run: Run) -> str:
    """The precision whose roof a run is drawn under: its trainer's, else fp32."""
    precision = run.data.params.get("trainer.precision", "32-true")
    return precision if precision in PRECISIONS else "32-true"


def figure(runs: list[Run], keys: list[str]) -> Figure | None:
    """The report's roofline: every run with roofline metrics under its device's roof; runs on
    other devices add theirs, dashed."""
    from hpml.analysis.roofline import attainable_flops_per_s
    from hpml.analysis.roofline_plot import describe_peak, roofline_figure

    measured = [r for r in runs if INTENSITY in r.data.metrics]
    if not measured or (peak := run_peak(measured[0])) is None:
        return None
    precision = run_precision(measured[0])
    drawn, owners, twins = with_counted(measured, points(measured))
    fig, artists = roofline_figure([p for p, _ in drawn], peak, precision, peak.name, twins)
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    xs = [low * (high / low) ** (i / 63) for i in range(64)]
    others = {p.name: p for r in measured if (p := run_peak(r)) and p.name != peak.name}
    for index, other in enumerate(others.values()):  # their roofs dashed, named in the legend
        ys = [attainable_flops_per_s(x, other, precision) for x in xs]
        ax.plot(xs, ys, linestyle="--", color=f"C{index + 2}", label=f"roof of {other.name}")
    ax.legend(loc="lower right", fontsize=8)  # as roofline_figure's, with the roofs added
    canvas = Canvas(figure=fig)
    for index, artist in artists.items():
        point, basis = drawn[index]
        achieved = (
            "not timed" if point.flops_per_s is None else f"{point.flops_per_s / 1e9:.3g} GFLOP/s"
        )
        canvas.tip(
            artist,
            f"{run_label(owners[index], keys)}\n{point.intensity:.3g} FLOP/byte, {achieved} "
            f"({basis})",
        )
    return Figure(
        "Roofline",
        f"Each run's training step (fwd+bwd FLOPs per sample x samples/s; FLOPs = 2 x MAC) "
        f"against its arithmetic intensity (FLOP/byte), under the roof of "
        f"{describe_peak(peak, precision)} ({peak.source})"
        + "".join(f"; dashed, {describe_peak(p, precision)}" for p in others.values())
        + "."
        + caption(twins),
        canvas.svg(),
    )


def table(
    runs: list[Run], rows: list[tuple[RooflinePoint, str]], peak: DevicePeak, precision: str
) -> str:
    """One line per run: intensity, achieved FLOP/s, share of the roof there, and the bound."""
    from hpml.analysis.roofline import attainable_flops_per_s, classify

    header = (
        f"{'run':<32} {'point':<16} {'FLOP/byte':>10} {'FLOP/s':>10} {'% of roof':>9}  "
        f"{'bound':<13}  performance"
    )
    lines = [header, "-" * len(header)]
    for run, (point, basis) in zip(runs, rows, strict=True):
        achieved = point.flops_per_s
        roof = attainable_flops_per_s(point.intensity, peak, precision)
        lines.append(
            f"{run.info.run_id:<32} {point.label[:16]:<16} {point.intensity:>10.3g} "
            f"{'-' if achieved is None else f'{achieved:.3g}':>10} "
            f"{'-' if achieved is None else f'{100 * achieved / roof:.1f}':>9}  "
            f"{classify(point, peak, precision):<13}  {basis}"
        )
    return "\n".join(lines)


def draw(args: argparse.Namespace) -> None:
    from hpml.analysis.roofline_plot import describe_peak, plot_roofline
    from hpml.report.stores import Stores

    stores = Stores.open([args.tracking_uri or default_tracking_uri()])
    runs, parent = stores.select(args.sweep, args.runs, args.experiment)
    lacking = [r for r in runs if INTENSITY not in r.data.metrics]
    runs = [r for r in runs if INTENSITY in r.data.metrics]
    if lacking:
        named = ", ".join(f"{r.info.run_name} ({r.info.run_id})" for r in lacking)
        message = (
            f"runs without roofline metrics ({INTENSITY}): {named}; train them with "
            "callbacks=analysis (or add callbacks/roofline.yaml)"
        )
        if not runs:
            raise HpmlError(message)
        print(f"hpml: warning: skipping {message}", file=sys.stderr)
    precision = run_precision(runs[0])
    peak = choose_peak(args.device, runs)
    rows = points(runs)
    print(f"roof: {describe_peak(peak, precision)}\n  source: {peak.source}")
    print(table(runs, verdict_rows(runs, rows), peak, precision))
    print(counted_table(runs, [point.label for point, _ in rows]))
    drawn, _, twins = with_counted(runs, rows)
    out = args.out or project_root() / "outputs" / "roofline" / (parent or runs[0]).info.run_id
    what = parent.info.run_name if parent else f"{len(runs)} runs"
    paths = plot_roofline(
        [p for p, _ in drawn], peak, out / "roofline", precision, f"{what} on {peak.name}", twins
    )
    for path in paths:
        if parent is not None:
            stores.of(parent).log_artifact(parent.info.run_id, str(path), STAGE)
        print(f"hpml: wrote {path}" + (f" (and to run {parent.info.run_id})" if parent else ""))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        draw(parse_args(argv))
    except HpmlError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with garbage.command():  # no job to start: full collections held to the end
        raise SystemExit(main())
