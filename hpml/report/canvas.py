"""How a report draws: matplotlib figures rendered to SVG text whose points carry tooltips.

SVG because it scales, embeds in one HTML file with no script, and is a static image as it
is. Hovering a point shows its run and config: each point is its own artist with an id, and
an SVG ``<title>`` (the browser's tooltip) is put inside that element. Figures are built on
``matplotlib.figure.Figure`` directly, never pyplot: no global state, nothing to close.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure as MplFigure
    from mlflow.entities import Run


@dataclass(frozen=True)
class Figure:
    """A plot of the report: its heading, one line on what it shows, and its SVG."""

    title: str
    caption: str
    svg: str


def run_label(run: Run, keys: list[str]) -> str:
    """A run as a tooltip names it: its name and the values of the keys its sweep varies."""
    from hpml.report.table import value

    values = ", ".join(f"{k}={value(run, k)}" for k in keys)
    return f"{run.info.run_name}: {values}" if values else str(run.info.run_name)


class Canvas:
    """One figure (``panels`` side by side, or one drawn elsewhere) whose artists carry tips."""

    def __init__(self, panels: int = 1, figure: MplFigure | None = None) -> None:
        if figure is None:
            from matplotlib.figure import Figure as MplFigure

            figure = MplFigure(figsize=(6.4 * panels, 4.2))
            figure.subplots(1, panels, squeeze=False)
        self.fig = figure
        self.axes = list(figure.axes)
        self.tips: dict[str, str] = {}

    def tip(self, artist: Artist, text: str) -> None:
        """Show ``text`` when the pointer is over ``artist``."""
        gid = f"hpml-pt-{len(self.tips)}"
        artist.set_gid(gid)
        self.tips[gid] = text

    def point(self, ax: Any, x: float, y: float, tip: str, **style: Any) -> None:
        (artist,) = ax.plot([x], [y], linestyle="none", **{"marker": "o", **style})
        self.tip(artist, tip)

    def svg(self) -> str:
        buffer = io.StringIO()
        if self.fig.get_layout_engine() is None:
            self.fig.tight_layout()
        self.fig.savefig(buffer, format="svg")
        text = buffer.getvalue()
        text = text[text.index("<svg") :]  # the XML header and doctype stay out of HTML
        for gid, tip in self.tips.items():
            start = text.find(f'<g id="{gid}"')
            if start >= 0:
                end = text.index(">", start) + 1
                text = f"{text[:end]}<title>{escape(tip)}</title>{text[end:]}"
        return text
