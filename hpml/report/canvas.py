"""How a report draws: matplotlib figures rendered to SVG whose points carry tooltips (an SVG
``<title>`` inside each point's element: no script, one HTML file), built on
``matplotlib.figure.Figure``, never pyplot; and what every figure shares: human units
(:func:`scaled`), log axes where values span more than 10x (:func:`log_if_wide`), plain tick
labels that do not overlap (:func:`tidy`).
"""

from __future__ import annotations

import io
import itertools
import math
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

from hpml.names import BYTES, BYTES_PER_S, FLOPS_PER_S, FLOPS_PER_SAMPLE, label, prefixed, unit_of
from hpml.report.table import short_name, value

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure
    from mlflow.entities import Run

# units (hpml.names) an axis shows with a prefix: unit -> (what is counted, what follows it)
PREFIXED = {
    BYTES: ("B", ""),
    BYTES_PER_S: ("B", "/s"),
    FLOPS_PER_SAMPLE: ("FLOP", "/sample, 2 x MAC"),
    FLOPS_PER_S: ("FLOP", "/s, 2 x MAC"),
}
UNITS = (
    "Units: kB, MB, GB = 10^3, 10^6, 10^9 bytes; MFLOP, GFLOP = 10^6, 10^9 floating-point "
    "operations, a multiply-accumulate counted as 2; ms = 10^-3 s."
)


@dataclass(frozen=True)
class Figure:
    """A plot of the report: its heading, one line on what it shows, and its SVG."""

    title: str
    caption: str
    svg: str


LABEL_CHARS = 30  # a label's longest line: a legend beside a panel leaves the panel its room
LABEL_LINES = 2  # lines a label wraps to before it is cut with an ellipsis


def run_label(run: Run, keys: list[str]) -> str:
    """A run as a tooltip names it: its name and the values of the keys its sweep varies."""
    values = ", ".join(f"{k}={value(run, k)}" for k in keys)
    return f"{run.info.run_name}: {values}" if values else str(run.info.run_name)


def key_values(run: Run, keys: Sequence[str], named: bool = True) -> str:
    """A run's values of ``keys`` as a plot names them: ``prune=fpgm, amount=0.8`` (each key by
    its last segment), ``fpgm, 0.8`` unless ``named``."""
    return ", ".join(
        f"{k.rsplit('.', 1)[-1]}={value(run, k)}" if named else value(run, k) for k in keys
    )


def varying(runs: Sequence[Run], keys: Sequence[str]) -> list[str]:
    """The ``keys`` whose value differs between ``runs``: those a plot of them names."""
    return [k for k in keys if len({value(r, k) for r in runs}) > 1]


def fit(text: str, chars: int = LABEL_CHARS, lines: int = LABEL_LINES) -> str:
    """``text`` wrapped at ``chars`` characters a line, cut after ``lines`` lines with an
    ellipsis: a label never longer than its plot (its tooltip keeps the whole)."""
    wrapped = textwrap.wrap(text, max(chars, 4), break_on_hyphens=False) or [""]
    if len(wrapped) > lines:
        wrapped = wrapped[:lines]
        wrapped[-1] = wrapped[-1][: max(chars, 4) - 1].rstrip(" ,") + "\u2026"
    return "\n".join(wrapped)


def distinct_labels(runs: Sequence[Run], keys: list[str], named: bool = True) -> list[str]:
    """Short names that tell the runs apart on an axis or in a legend: each run's values of
    those ``keys`` that vary between ``runs`` (:func:`key_values`), else its short name
    (``job 3``), with its job (or run id) where two would read the same."""
    shown = varying(runs, keys)
    found = [key_values(run, shown, named) or short_name(run) for run in runs]
    twice = {text for text, n in Counter(found).items() if n > 1}
    apart = [short_name(run) if shown else run.info.run_id[:8] for run in runs]
    return [
        f"{text} ({tag})" if text in twice else text for text, tag in zip(found, apart, strict=True)
    ]


def scaled(name: str, values: Sequence[float]) -> tuple[float, str]:
    """``(divisor, axis label)`` that show metric ``name``'s ``values`` in a human unit:
    ``prune_after/size_bytes`` at 2e6 gives ``(1e6, "prune_after/size (MB)")``."""
    unit = unit_of(name)
    if unit not in PREFIXED:
        return 1.0, label(name)
    counted, rest = PREFIXED[unit]
    factor, shown = prefixed(values, counted)
    return factor, f"{name[: -len(unit) - 1]} ({shown}{rest})"


def plain(value: float, _position: object = None) -> str:
    """A tick label as a reader writes the number: ``0.5``, ``200``, ``20,000``."""
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:g}"


def log_if_wide(ax: Axes, which: str, values: Sequence[float]) -> bool:
    """Make axis ``which`` (``"x"`` or ``"y"``) logarithmic when ``values`` are positive and
    span more than 10x, ticks at 1, 2 and 5 x 10^k (10^k beyond 3 decades). Whether it did."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or min(finite) <= 0 or max(finite) <= 10 * min(finite):
        return False
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    decades = math.log10(max(finite) / min(finite))
    axis.set_major_locator(LogLocator(subs=(1.0,) if decades > 3 else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())
    return True


def ticks_at(ax: Axes, values: Sequence[float]) -> None:
    """x ticks exactly at ``values``, on a base-2 log scale."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(values))))
    ax.xaxis.set_major_formatter(FuncFormatter(plain))
    ax.xaxis.set_minor_locator(NullLocator())


def _fits(boxes: list[Any], rotation: float, gap: float = 2.0) -> bool:
    """Whether tick labels whose level boxes are ``boxes`` stay apart turned by ``rotation``
    degrees (turned, two labels lie ``spacing x sin(rotation)`` apart)."""
    boxes = sorted(boxes, key=lambda b: b.x0)
    if rotation == 0:
        return all(a.x1 + gap <= b.x0 for a, b in itertools.pairwise(boxes))
    centres = [(b.x0 + b.x1) / 2 for b in boxes]
    height = max((b.height for b in boxes), default=0.0)
    spacing = min((b - a for a, b in itertools.pairwise(centres)), default=math.inf)
    return spacing * math.sin(math.radians(rotation)) >= height + gap


def tidy(fig: MplFigure) -> None:
    """Plain tick numbers (units carry the scale) and x tick labels that do not overlap: level
    if they fit, else turned 30, 45 or 90 degrees, else every second number or smaller names."""
    from matplotlib.ticker import ScalarFormatter

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(formatter := axis.get_major_formatter(), ScalarFormatter):
                formatter.set_useOffset(False)
                formatter.set_scientific(False)
    fig.draw_without_rendering()
    for ax in fig.axes:
        texts = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        if len(texts) < 2 or any(t.get_rotation() for t in texts):
            continue  # one label, or a figure that turned its own
        boxes = [t.get_window_extent() for t in texts]
        rotation = next((r for r in (0, 30, 45, 90) if _fits(boxes, r)), 90)
        if rotation:
            for text in texts:
                text.set(rotation=rotation, ha="right" if rotation < 90 else "center")
                text.set_rotation_mode("anchor" if rotation < 90 else "default")
        if _fits(boxes, rotation):
            continue
        numbers = all(_number(t.get_text()) for t in texts)
        for text in texts[1::2] if numbers else ():
            text.set_visible(False)
        if not numbers:
            for text in texts:
                text.set_fontsize(5)


def _number(text: str) -> bool:
    try:
        float(text.replace(",", "").replace("\u2212", "-"))
    except ValueError:
        return False
    return True


class Canvas:
    """One figure (``panels`` side by side, :data:`ROW` a row, or one drawn elsewhere) whose
    artists carry tips."""

    ROW = 3  # panels a row: more would shrink each to a strip on a 1400 px page

    def __init__(self, panels: int = 1, figure: MplFigure | None = None) -> None:
        if figure is None:
            from matplotlib.figure import Figure as MplFigure

            rows, columns = -(-panels // self.ROW), min(panels, self.ROW)
            figure = MplFigure(figsize=(6.4 * columns, 4.2 * rows), layout="constrained")
            for ax in figure.subplots(rows, columns, squeeze=False).flat[panels:]:
                ax.remove()
        self.fig = figure
        self.axes = list(figure.axes)
        self.tips: dict[str, str] = {}

    def tip(self, artist: Artist, text: str) -> None:
        """Show ``text`` when the pointer is over ``artist``."""
        gid = f"hpml-pt-{len(self.tips)}"
        artist.set_gid(gid)
        self.tips[gid] = text

    def legend(self, ax: Axes, *entries: Any, **options: Any) -> None:
        """``ax``'s legend (7 pt, no frame unless ``options`` say), each name fitted
        (:func:`fit`), a cut name whole in its tooltip."""
        legend = ax.legend(*entries, **{"fontsize": 7, "frameon": False, **options})
        for text in legend.get_texts():
            whole = text.get_text()
            if (short := fit(whole)) != whole:
                text.set_text(short)
                self.tip(text, whole)

    def ticks(self, ax: Axes, names: Sequence[str], tips: Sequence[str]) -> None:
        """x ticks at 0, 1, ... named ``names``, each fitted to its share of the panel's
        width (7 pt glyphs about 4 pt wide), its tooltip ``tips[i]``."""
        width = ax.get_position().width * self.fig.get_figwidth() * 72 / max(len(names), 1)
        ax.set_xticks(range(len(names)), [fit(n, int(width / 4), 3) for n in names], fontsize=7)
        for text, tip in zip(ax.get_xticklabels(), tips, strict=True):
            self.tip(text, tip)

    def point(self, ax: Any, x: float, y: float, tip: str, **style: Any) -> None:
        (artist,) = ax.plot([x], [y], linestyle="none", **{"marker": "o", **style})
        self.tip(artist, tip)

    def svg(self) -> str:
        buffer = io.StringIO()
        tidy(self.fig)
        self.fig.savefig(buffer, format="svg", bbox_inches="tight")  # no text cut at an edge
        text = buffer.getvalue()
        text = text[text.index("<svg") :]  # the XML header and doctype stay out of HTML
        for gid, tip in self.tips.items():
            if (start := text.find(f'<g id="{gid}"')) >= 0:
                end = text.index(">", start) + 1
                text = f"{text[:end]}<title>{escape(tip)}</title>{text[end:]}"
        return text
