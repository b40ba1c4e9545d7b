"""How roofline points are shown: a CSV with units in its header, a one-line roof, the plot.

Shared by the roofline callback and ``python -m hpml.report.roofline``; matplotlib is imported
only when a plot is drawn.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.analysis.devices import DevicePeak
from hpml.analysis.measured_peak import is_measured
from hpml.analysis.roofline import RooflinePoint, attainable_flops_per_s, classify
from hpml.names import human

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure

CSV_COLUMNS = (
    "layer",
    "type",
    "flops",
    "bytes",
    "intensity_flop_per_byte",
    "seconds",
    "flops_per_s",
    "bound",
)


def points_csv(points: list[RooflinePoint], peak: DevicePeak, precision: str = "32-true") -> str:
    """CSV text, one row per point, with the units in the column names; blank = not timed."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in points:
        writer.writerow(
            [
                p.label,
                p.kind,
                int(p.flops),
                int(p.bytes),
                f"{p.intensity:.6g}",
                "" if p.seconds is None else f"{p.seconds:.6g}",
                "" if p.flops_per_s is None else f"{p.flops_per_s:.6g}",
                classify(p, peak, precision),
            ]
        )
    return out.getvalue()


# a point on the roof within float rounding is not above it: a roof raised to a point
# (measured_peak.raise_roof) gives back its FLOP/s as intensity x bandwidth, a few ulps apart
ON_ROOF = 1 + 1e-9


def above_roof(
    points: list[RooflinePoint], peak: DevicePeak, precision: str = "32-true"
) -> list[tuple[RooflinePoint, str]]:
    """Timed points above the roof at their intensity, each with why it can be."""
    measured = is_measured(peak)
    above = []
    for p in points:
        if not p.flops_per_s or p.intensity <= 0:
            continue
        if p.flops_per_s <= attainable_flops_per_s(p.intensity, peak, precision) * ON_ROOF:
            continue
        if not measured:
            why = "timing error: a datasheet roof cannot be beaten"
        elif classify(p, peak, precision) == "memory-bound":
            why = "data in cache: the bytes assume no reuse between layers"
        else:
            why = "faster than the micro-benchmarks (other load while they ran, or slower kernels)"
        above.append((p, why))
    return above


def describe_peak(peak: DevicePeak, precision: str = "32-true") -> str:
    """``"Tesla V100 SXM2: 15.7 TFLOP/s (32-true), 900 GB/s, ridge 17.4 FLOP/byte"``."""
    return (
        f"{peak.name}: {human(peak.peak_for_precision(precision), 'FLOP/s')} ({precision}), "
        f"{human(peak.memory_bytes_per_s, 'B/s')}, "
        f"ridge {peak.ridge_for_precision(precision):.3g} FLOP/byte"
    )


def plot_roofline(
    points: list[RooflinePoint],
    peak: DevicePeak,
    path_stem: Path | str,
    precision: str = "32-true",
    title: str | None = None,
    twins: Mapping[int, int] | None = None,
) -> list[Path]:
    """:func:`roofline_figure` written to ``<path_stem>.png`` and ``.svg``."""
    fig, _ = roofline_figure(points, peak, precision, title, twins)
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [Path(f"{stem}.png"), Path(f"{stem}.svg")]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    return paths


def intensity_label(points: list[RooflinePoint]) -> str:
    """The x axis's label, saying once what its intensities are: analytic, counted or both."""
    if not any(p.counted for p in points):
        return "arithmetic intensity (FLOP/byte), analytic: FLOPs over the least bytes moved"
    if all(p.counted for p in points):
        return "arithmetic intensity (FLOP/byte), counted: FLOPs over DRAM bytes (Nsight Compute)"
    return (
        "arithmetic intensity (FLOP/byte)\ndiamonds: counted, FLOPs over DRAM bytes (Nsight "
        "Compute); circles: analytic, over the least bytes"
    )


def _plain(value: float) -> str:
    """A log axis's tick as a plain number: ``1,000,000``, ``0.01``, never ``1e+06``."""
    return f"{value:,.0f}" if value >= 1 else f"{value:.3g}"


def roofline_figure(
    points: list[RooflinePoint],
    peak: DevicePeak,
    precision: str = "32-true",
    title: str | None = None,
    twins: Mapping[int, int] | None = None,
) -> tuple[Figure, dict[int, Artist]]:
    """Log-log roofline with ``points`` on it, and the artist drawn for each point, by index.

    Timed points are filled at their FLOP/s, untimed ones hollow on the roof; counted points
    (``RooflinePoint.counted``) are diamonds, analytic ones circles; points above the roof are
    named in a note. ``twins`` maps an analytic point to the counted point of the same work: the
    analytic one is drawn grey, without a verdict of its own (its work's is the counted one's),
    joined to its twin. A bare ``Figure``, never pyplot: safe in callbacks and threads.
    """
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    compute = peak.peak_for_precision(precision)
    bandwidth = peak.memory_bytes_per_s
    ridge = compute / bandwidth
    drawn = [(i, p) for i, p in enumerate(points) if p.flops > 0 and p.bytes > 0]
    heights = [
        p.flops_per_s or attainable_flops_per_s(p.intensity, peak, precision) for _, p in drawn
    ]
    intensities = [p.intensity for _, p in drawn] + [ridge]
    x_lo, x_hi = min(intensities) / 4, max(intensities) * 4
    y_lo = min([bandwidth * x_lo, *heights]) / 2
    fig = Figure(figsize=(9, 6), layout="constrained")
    ax = fig.add_subplot()
    x = np.geomspace(x_lo, x_hi, 256)
    ax.plot(
        x,
        np.minimum(compute, bandwidth * x),
        color="black",
        linewidth=2,
        label=f"roof: {human(compute, 'FLOP/s')} ({precision}), {human(bandwidth, 'B/s')}"
        + (" (raised to the best point)" if "raised to" in peak.name else ""),
    )
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    note = partial(ax.annotate, textcoords="offset points", fontsize=8)  # xytext in points
    note(
        f"ridge {ridge:.3g} FLOP/byte",
        (ridge, 1.0),
        xycoords=("data", "axes fraction"),  # at the top: the legend sits at the bottom
        xytext=(4, -12),
        color="grey",
    )
    note(f"compute peak {human(compute, 'FLOP/s')}", (x_hi, compute), xytext=(-4, -12), ha="right")
    slope_x = (x_lo * ridge) ** 0.5
    note(
        f"memory {human(bandwidth, 'B/s')}",
        (slope_x, bandwidth * slope_x),
        xytext=(-6, 6),
        ha="right",
        rotation=25,
        rotation_mode="anchor",
    )
    colours = {"memory-bound": "tab:blue", "compute-bound": "tab:red"}
    twins = dict(twins or {})
    where = {i: (p.intensity, height) for (i, p), height in zip(drawn, heights, strict=True)}
    labelled: set[str] = set()
    artists: dict[int, Artist] = {}
    for (index, point), height in zip(drawn, heights, strict=True):
        bound = classify(point, peak, precision)
        timed = point.flops_per_s is not None
        legend = f"{bound}{', counted' if point.counted else ''}"
        legend += "" if timed else " (not timed: on its roof)"
        colour = colours[bound]
        if index in twins:  # the counted twin carries the verdict
            legend, colour = "analytic, beside its counted point", "grey"
            if twins[index] in where:
                (x0, y0), (x1, y1) = (point.intensity, height), where[twins[index]]
                ax.plot([x0, x1], [y0, y1], color="grey", linestyle=":", linewidth=1, zorder=2)
        artists[index] = ax.scatter(
            point.intensity,
            height,
            s=40,
            zorder=3,
            marker="D" if point.counted else "o",
            edgecolors=colour,
            facecolors=colour if timed and index not in twins else "none",
            label=None if legend in labelled else legend,
        )
        labelled.add(legend)
        if index in twins:  # its twin is named
            continue
        note(
            point.label,
            (point.intensity, height),
            # points on the roof line up: slanted labels above it fan out
            xytext=(4, -3) if timed else (0, 6),
            rotation=0 if timed else 60,
            fontsize=7,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, max([compute, *heights]) * 3)  # a noisy measured peak can be beaten
    ax.set_xlabel(intensity_label([p for _, p in drawn]))
    # GFLOP/s as plain numbers: 10^9 to 10^15 FLOP/s read as 1 to 1,000,000, not as powers
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _plain(v / 1e9)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _plain(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("performance (GFLOP/s, 2 x MAC)")
    ax.set_title(title or f"Roofline on {peak.name}", fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    if above := above_roof([p for _, p in drawn], peak, precision):
        note = "\n".join(f"{p.label}: {why}" for p, why in above)
        ax.text(
            0.01,
            0.99,
            f"above the roof:\n{note}",
            transform=ax.transAxes,
            fontsize=7,
            va="top",
            color="tab:red",
        )
    return fig, artists
