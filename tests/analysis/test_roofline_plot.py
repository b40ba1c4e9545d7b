"""How roofline points are shown: the CSV's header and rows, the PNG and SVG plots."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.image import imread

from hpml.analysis.devices import KNOWN_DEVICES
from hpml.analysis.roofline import RooflinePoint
from hpml.analysis.roofline_plot import (
    CSV_COLUMNS,
    above_roof,
    plot_roofline,
    points_csv,
    roofline_figure,
)

V100 = KNOWN_DEVICES["v100"]


def test_csv_has_units_in_its_header_and_a_row_per_point():
    points = [
        RooflinePoint("features.0", 2e9, 1e7, 0.01, "Conv2d"),
        RooflinePoint("features.1", 0, 4e6, None, "ReLU"),
    ]
    lines = points_csv(points, V100).splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert "intensity_flop_per_byte" in lines[0] and "flops_per_s" in lines[0]
    assert lines[1] == "features.0,Conv2d,2000000000,10000000,200,0.01,2e+11,compute-bound"
    assert lines[2] == "features.1,ReLU,0,4000000,0,,,memory-bound"


def test_plot_writes_a_readable_png_and_a_valid_svg(tmp_path):
    points = [
        RooflinePoint("conv", 2e12, 1e10, 0.5),
        RooflinePoint("linear", 1e9, 5e8, None),
        RooflinePoint("relu", 0, 1e8, 0.01),
        RooflinePoint("model", 2.1e12, 1.1e10, 0.6),
    ]
    paths = plot_roofline(points, V100, tmp_path / "sub" / "roofline.v100")
    assert [p.name for p in paths] == ["roofline.v100.png", "roofline.v100.svg"]
    png, svg = paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(png)
    assert pixels.shape[0] >= 600 and pixels.shape[1] >= 900
    assert pixels[..., :3].std() > 0.05  # lines, points and text, not a blank canvas
    assert png.stat().st_size > 20_000
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_plot_of_points_without_flops_still_draws_the_roof(tmp_path):
    png, _ = plot_roofline([RooflinePoint("relu", 0, 1e8, 0.01)], V100, tmp_path / "empty")
    assert png.stat().st_size > 10_000


def test_plot_names_the_points_above_its_roof_and_why():
    # V100: 15.7 TFLOP/s fp32 (tf32 is off by default), 900 GB/s; ridge 17.4 FLOP/byte
    above = RooflinePoint("conv", 2e12, 1e10, 0.05)  # 40 TFLOP/s at 200 FLOP/byte
    under = RooflinePoint("fc", 1e9, 1e9, 0.01)  # 100 GFLOP/s at 1 FLOP/byte: below its slope
    assert [p for p, _ in above_roof([above, under], V100)] == [above]
    fig, _ = roofline_figure([above, under], V100)
    (note,) = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("above")]
    assert "conv: timing error: a datasheet roof cannot be beaten" in note
    assert "fc" not in note
    raised = replace(V100, name="V100, raised to the best point")
    legend = roofline_figure([under], raised)[0].axes[0].get_legend()
    assert "(raised to the best point)" in legend.get_texts()[0].get_text()


def test_ticks_are_plain_numbers_and_the_ridge_label_clears_the_legend():
    h100 = KNOWN_DEVICES["h100-sxm"]
    point = RooflinePoint("conv", 4e13, 1e11, 0.1)  # 400 TFLOP/s: the axis reaches 10^6 GFLOP/s
    fig, _ = roofline_figure([point], h100)
    ax = fig.axes[0]
    FigureCanvasAgg(fig).draw()
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "1,000,000" in ticks and not any("e+" in t for t in ticks)
    renderer = fig.canvas.get_renderer()
    (ridge,) = [t for t in ax.texts if t.get_text().startswith("ridge")]
    legend = ax.get_legend().get_window_extent(renderer)
    assert not ridge.get_window_extent(renderer).overlaps(legend)


def test_a_counted_point_is_a_diamond_beside_its_grey_analytic_twin():
    h100 = KNOWN_DEVICES["h100-sxm"]  # ridge 148 FLOP/byte at 32-true
    analytic = RooflinePoint("vgg11", 3e12, 2e10, 0.1)  # 150 FLOP/byte: right of the ridge
    counted = RooflinePoint("vgg11", 3e12, 2e11, 0.2, counted=True)  # 15 FLOP/byte
    alone = RooflinePoint("vgg13", 4e12, 2e10, 0.1)
    fig, artists = roofline_figure([analytic, counted, alone], h100, twins={0: 1})
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "analytic, beside its counted point" in legend
    assert "memory-bound, counted" in legend and "compute-bound" in legend
    twin = artists[0]
    assert twin.get_facecolor().size == 0 or twin.get_facecolor()[0][3] == 0  # hollow
    assert tuple(twin.get_edgecolor()[0][:3]) == pytest.approx((0.5, 0.5, 0.5), abs=0.01)
    diamond, circle = artists[1].get_paths()[0], artists[2].get_paths()[0]
    assert len(diamond.vertices) != len(circle.vertices)  # a "D" marker, not an "o"
    joins = [line for line in ax.lines if line.get_linestyle() == ":"]  # and the ridge's
    (joined,) = [line for line in joins if len(set(line.get_xdata())) == 2]
    assert list(joined.get_xdata()) == pytest.approx([150.0, 15.0])
    assert [t.get_text() for t in ax.texts].count("vgg11") == 1  # named once, at its counted point
    label = ax.get_xlabel()
    assert "diamonds: counted" in label and "circles: analytic" in label


def test_analytic_points_alone_say_so_once():
    fig, _ = roofline_figure([RooflinePoint("conv", 2e12, 1e10, 0.5)], V100)
    ax = fig.axes[0]
    assert ax.get_xlabel().count("analytic") == 1
    assert not any("analytic" in t.get_text() for t in ax.get_legend().get_texts())
    assert not any("counted" in t.get_text() for t in ax.get_legend().get_texts())
