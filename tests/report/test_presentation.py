"""A report a researcher would publish: its header read back from the runs' tags, human units,
log axes where values span more than 10x, every line and point named, the runs table folded to
fit, no "study N" the page does not define, and a page no wider than a 1400-px window."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest
from matplotlib.figure import Figure as MplFigure

from hpml.names import prefixed
from hpml.report.canvas import UNITS, Canvas, _fits, fit, log_if_wide, scaled
from tests.report.test_report import Page

METHODS = ("l1_structured", "fpgm")
AMOUNTS = (0.2, 0.8)
COMMAND = "python -m hpml.train -m experiment=vae_pruning prune=l1_structured,fpgm"
SIZE = 2_614_821.0  # bytes of the unpruned VAE's state dict
NOISY = "other processes used 80% of the CPU during timed work (limit 15%)"


def _texts(svg: str) -> list[str]:
    """The text matplotlib drew (glyphs as paths, each string in a comment before them)."""
    return re.findall(r"<!-- (.*?) -->", svg)


def _sweep(client) -> tuple[list, object]:
    """A pruning sweep as hpml logs one: a parent, 2 pruners x 2 sparsities and a repeat of
    the first config, with the environment tags, metrics and val/loss history of real runs."""
    from mlflow.entities import Metric, Param, RunTag

    experiment = client.create_experiment("vae_pruning")
    parent = client.create_run(
        experiment,
        run_name="sweep vae_pruning",
        tags={"hpml.sweep_parent": "true", "hpml.sweep_command": COMMAND},
    )
    configs = [(m, a, 0) for m in METHODS for a in AMOUNTS] + [(METHODS[0], AMOUNTS[0], 1)]
    for job, (method, amount, replicate) in enumerate(configs):
        tags = {
            "mlflow.parentRunId": parent.info.run_id,
            "hpml.job_num": str(job),
            "hpml.choice.prune": method,
            "hpml.choice.model": "vae",
            "hpml.host": "bench-host",
            "hpml.os": "Linux-6.1-x86_64",
            "hpml.cpu_model": "AMD EPYC 7B13",
            "hpml.cpu_count": "2",
            "hpml.cpu_threads": "2",
            "hpml.device": "cpu: AMD EPYC 7B13",
            "hpml.torch_version": "2.14.1",
            "hpml.cuda_version": "None",
            "hpml.git_commit": "0123abcd" * 5,
            "hpml.git_dirty": "False",
            "hpml.load_avg_1m_5m_15m": f"{1.5 + job / 4:.2f} 1.00 0.80",
            "hpml.peak_memory_source": "process peak RSS",
            "hpml.sweep_command": COMMAND,
            "hpml.noisy": str(job == 2).lower(),
        }
        if job == 2:
            tags["hpml.noisy.reason"] = NOISY
        # as hpml names a sweep's job: its model and data, then its overrides
        name = f"vae/synthetic_mnist [prune.amount={amount},prune={method},replicate={replicate}]"
        run = client.create_run(experiment, run_name=name, tags=tags, start_time=1_700_000_000_000)
        params = {
            "prune.method": method,
            "prune.amount": str(amount),
            "replicate": str(replicate),
            "model.latent": "20",
        }
        kept = 1 - amount
        metrics = {
            "prune_before/val_loss_nats": 543.5,
            "prune_after/val_loss_nats": 543.2 + amount + 0.01 * job,
            "prune_before/fwd_flops_per_sample": 1_302_400.0,
            "prune_after/fwd_flops_per_sample": 1_302_400.0 * kept**2,
            "prune_before/size_bytes": SIZE,
            "prune_after/size_bytes": SIZE * kept**2,
            "prune_before/latency_b1_ms": 0.2,
            "prune_after/latency_b1_ms": 0.2 * kept + 0.02 * job,
            "memory/weights_bytes": 2.6e6 * kept,
            "memory/gradients_bytes": 2.6e6 * kept,
            "memory/optimizer_state_bytes": 5.2e6 * kept,
            "memory/activations_bytes": 1.2e6,
            "memory/peak_bytes": 1.7e9,
            "train/peak_memory_bytes": 1.7e9,
            "train/throughput_samples_per_s": 3000.0 + 100 * job,
            "train/step_time_p50_ms": 40.0 - job,
            "train/epoch_time_s": 0.8,
            "test/loss": 543.0,
            "val/loss": 542.0 + amount,
            "noise/other_cpu_pct": 80.0 if job == 2 else 5.0,
        }
        history = [Metric("val/loss", 900.0 - 300 * step, 0, step) for step in range(3)]
        client.log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, 0, 0) for k, v in metrics.items() if k != "val/loss"] + history,
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag("mlflow.runName", name)],
        )
        client.set_terminated(run.info.run_id, "FINISHED", end_time=1_700_000_000_000 + 60_000)
    client.set_terminated(parent.info.run_id, "FINISHED")
    from hpml.report.runs import sweep_children

    parent = client.get_run(parent.info.run_id)
    return sweep_children(client, parent), parent


@pytest.fixture(scope="module")
def written(store_template: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """The report of :func:`_sweep`, built once for this module's tests (a copy of the
    session's store: the report only reads it)."""
    from mlflow import MlflowClient

    from hpml.report.__main__ import build

    folder = tmp_path_factory.mktemp("presentation")
    shutil.copy(store_template, folder / "mlflow.db")
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs, parent = _sweep(client)
    report = build(client, runs, parent)
    html, _ = report.write(folder / "report")
    return report, html


def _figure(report, title: str):
    (figure,) = [f for f in report.figures if f.title == title]
    return figure


def test_header_names_what_ran_where_and_when(written) -> None:
    report, html = written
    fields = dict(report.header)
    assert fields["experiment"] == "vae_pruning"
    assert "prune = l1_structured, fpgm" in fields["swept"]
    assert "prune.amount = 0.2, 0.8" in fields["swept"]
    assert fields["command"] == COMMAND
    assert fields["git commit"] == "0123abcd" * 5
    assert fields["host"] == "bench-host"
    assert fields["CPU"] == "AMD EPYC 7B13, 2 logical CPUs, torch threads: 2"
    assert fields["torch"] == "2.14.1"  # no CUDA build: no CUDA version said
    assert "GPU" not in fields
    assert fields["load"] == (
        "1-min load average at run start 1.50 to 2.50 (median 2.00, 5 runs) on 2 logical CPUs; "
        "other processes' CPU during timed work: median 5 %, at most 80 %; "
        f"1 of 5 runs tagged noisy, e.g. {NOISY}; each run's reason in its hpml.noisy.reason tag"
    )
    assert fields["date"] == "2023-11-14 22:13 to 22:14 UTC (1 min)"
    text = html.read_text()
    for name, _ in report.header:
        assert f"<dt>{name}</dt>" in text
    assert f"<code>{COMMAND}</code>" in text


def test_no_heading_names_a_study_the_page_does_not_define(written) -> None:
    _, html = written
    page = Page()
    page.feed(html.read_text())
    assert page.headings, "the page has sections"
    assert not [h for h in page.headings if re.search(r"\bstudy\b", h, re.I)]
    assert not re.search(r"\(study \d\)", html.read_text(), re.I)


def test_runs_table_shows_key_columns_and_folds_the_rest(written) -> None:
    report, html = written
    text = html.read_text()
    shown = text[text.index('<table id="runs">') : text.index("</table>")]
    heads = re.findall(r"<th>(.*?)</th>", shown)
    assert heads[:4] == ["run", "status", "prune", "prune.amount"]
    metrics = heads[4:]
    assert 0 < len(metrics) <= 7
    assert "val/<wbr>loss" in metrics
    assert "train/<wbr>peak_memory (GB)" not in metrics  # folded below
    folded = text[text.index("<details><summary>All") :]
    assert '<table id="runs-all">' in folded
    assert "train/<wbr>peak_memory (GB)" in folded  # bytes in a human unit
    assert "<td>1.7</td>" in folded  # 1.7e9 bytes read as 1.7 GB
    assert len(re.findall(r"<tr", shown)) == 1 + len(report.rows)


def test_sparsity_plot_names_each_pruner_and_starts_from_the_unpruned_model(written) -> None:
    report, _ = written
    texts = _texts(_figure(report, "Loss and FLOPs vs sparsity").svg)
    assert {"l1_structured", "fpgm", "prune.method"} <= set(texts)
    assert "before (0 %, median of 5)" in texts
    assert "prune_after/fwd (MFLOP/sample, 2 x MAC)" in texts
    assert "0" in texts  # the x axis reaches the 0 % baseline
    assert not [t for t in texts if re.fullmatch(r"[+\-\u2212]?\d(\.\d+)?e[+\-\u2212]?\d+", t)]


def test_latency_size_points_carry_method_and_sparsity_on_a_log_size_axis(written) -> None:
    report, _ = written
    figure = _figure(report, "Latency vs size of the optimised variants")
    texts = _texts(figure.svg)
    for method in METHODS:
        for amount in AMOUNTS:
            assert f"prune: {method}, {100 * amount:g} %" in texts
    assert "before prune" in texts and "Pareto front" in texts
    assert "model size, saved state dict (MB)" in texts
    # sizes from 0.1 to 2.6 MB span more than 10x: log ticks at 1, 2, 5 x 10^k
    assert {"0.2", "0.5", "1", "2"} <= set(texts)
    assert UNITS in figure.caption


def test_memory_plot_tells_repeats_apart_and_explains_the_peak(written) -> None:
    report, _ = written
    figure = _figure(report, "Memory breakdown")
    texts = _texts(figure.svg)
    # a bar a run, named by the runs table's keys (the key's last part), wrapped to the bar:
    # two runs of one config told apart by replicate; a run's whole name only in its tooltip
    assert "run (prune, amount, replicate)" in texts
    assert {"0.2, 0", "0.2, 1", "fpgm, 0.8, 0"} <= set(texts)
    assert not [t for t in texts if "synthetic" in t]
    whole = "vae/synthetic_mnist [prune.amount=0.2,prune=l1_structured,replicate=1]"
    assert f"<title>{whole}: prune=l1_structured, prune.amount=0.2, replicate=1</title>" in (
        figure.svg
    )
    assert "tensors of the first training step (MB)" in texts
    assert "memory (MB)" in texts and "1000" in texts  # 1.7 GB against about 10 MB: log
    assert "peak: process peak RSS" in texts
    assert "Python interpreter" in figure.caption and "tensors only" in figure.caption
    assert "Here the peak is 180x to 520x the tensors' total." in figure.caption


def test_learning_curves_have_a_legend_entry_per_run(written) -> None:
    report, _ = written
    texts = _texts(_figure(report, "Learning curves").svg)
    assert len([t for t in texts if t.startswith("prune=")]) == 5  # an entry per run
    configs = [(m, a, 0) for m in METHODS for a in AMOUNTS] + [(METHODS[0], AMOUNTS[0], 1)]
    for method, amount, replicate in configs:  # wrapped at the legend's width
        entry = fit(f"prune={method}, amount={amount}, replicate={replicate}")
        assert "\n" in entry and set(entry.split("\n")) <= set(texts)
    assert {"300", "500"} <= set(texts)  # 300..900 is 3x: a linear axis


def test_units_pick_a_prefix_that_keeps_numbers_readable() -> None:
    assert prefixed([2_614_821.0], "B") == (1e6, "MB")
    assert prefixed([512.0], "B") == (1.0, "bytes")
    assert prefixed([3.2e9], "FLOP") == (1e9, "GFLOP")
    assert scaled("train/achieved_flops_per_s", [2.1e11]) == (
        1e9,
        "train/achieved (GFLOP/s, 2 x MAC)",
    )
    assert scaled("train/step_time_p50_ms", [40.0]) == (1.0, "train/step_time_p50 (ms)")


@pytest.mark.parametrize(("values", "log"), [([1.0, 50.0], True), ([1.0, 9.0], False)])
def test_log_axis_only_where_values_span_more_than_10x(values: list[float], log: bool) -> None:
    ax = MplFigure().subplots()
    ax.plot([0, 1], values)
    assert log_if_wide(ax, "y", values) is log
    assert ax.get_yscale() == ("log" if log else "linear")


def test_tick_labels_are_plain_and_never_overlap() -> None:
    canvas = Canvas()
    ax = canvas.axes[0]
    ax.plot([1, 2, 3], [1e6 + 1, 1e6 + 2, 1e6 + 3])  # matplotlib's default: "+1e6" offset
    names = [f"a long category name {i}" for i in range(12)]
    twin = ax.twiny()
    twin.set_xticks(range(12), names)
    svg = canvas.svg()
    assert "+1e6" not in _texts(svg) and "1000002" in "".join(_texts(svg))
    labels = [t for t in twin.get_xticklabels() if t.get_visible()]
    assert len(labels) == 12 and labels[0].get_rotation() > 0
    canvas.fig.draw_without_rendering()
    level = MplFigure(figsize=canvas.fig.get_size_inches())
    copy = level.subplots()
    copy.set_xticks(range(12), names)
    level.draw_without_rendering()
    assert not _fits([t.get_window_extent() for t in copy.get_xticklabels()], 0)
    assert _fits([t.get_window_extent() for t in copy.get_xticklabels()], labels[0].get_rotation())


# each figure's text boxes as Chromium lays the page out: a text is a group holding its string
# as a comment and a group of glyphs per line; a line's box, turned with its text, is a quad
TEXT_BOXES = """
const quad = (line) => {
  const b = line.getBBox(), m = line.getScreenCTM();
  return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
    .map(([x, y]) => { const p = new DOMPoint(x, y).matrixTransform(m); return [p.x, p.y]; });
};
const depth = (a, b) => Math.min(...[a, b].flatMap((q) => q.map((p, i) => {
  const n = q[(i + 1) % 4], axis = [p[1] - n[1], n[0] - p[0]];
  const span = (r) => r.map(([x, y]) => x * axis[0] + y * axis[1]);
  const len = Math.hypot(...axis) || 1, s = span(a), t = span(b);
  const low = Math.max(Math.min(...s), Math.min(...t));
  return (Math.min(Math.max(...s), Math.max(...t)) - low) / len;
})));
return [...document.querySelectorAll('figure > svg')].map((svg) => {
  const edge = svg.getBoundingClientRect(), texts = [];
  for (const g of svg.querySelectorAll('g')) {
    const name = [...g.childNodes].find((n) => n.nodeType === Node.COMMENT_NODE);
    const lines = [...g.children].filter((c) => c.tagName === 'g' && c.getBBox().width > 0);
    if (name && lines.length) texts.push([name.data.trim(), lines.map(quad)]);
  }
  const faults = [];
  texts.forEach(([name, quads], i) => {
    if (quads.flat().some(([x, y]) => x < edge.left - 1 || x > edge.right + 1
        || y < edge.top - 1 || y > edge.bottom + 1)) faults.push(`${name} leaves the figure`);
    texts.slice(i + 1).forEach(([other, theirs]) => {
      if (quads.some((q) => theirs.some((t) => depth(q, t) > 1)))
        faults.push(`${name} overlaps ${other}`);
    });
  });
  return {texts: texts.length, faults};
});
"""


def test_page_fits_a_1400_px_window(written, tmp_path: Path) -> None:
    """Headless Chromium lays the page out 1400 px wide: nothing makes it scroll sideways, and
    in every figure no text overlaps another or leaves the figure."""
    report, html = written
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium) for the browser check")
    probe = tmp_path / "probe.html"
    script = (  # the page's width, the window's, and the runs table's box against its own
        "<script>addEventListener('load', () => { const t = document.getElementById('runs')"
        ".parentElement; const figures = (() => {" + TEXT_BOXES + "})(); "
        "document.body.insertAdjacentHTML('beforeend', '<pre id=\"width\">' +"
        " [document.documentElement.scrollWidth, innerWidth, t.scrollWidth, t.clientWidth]"
        ".join(' ') + '</pre><pre id=\"texts\">' + JSON.stringify(figures) + '</pre>'); "
        "});</script>"
    )
    probe.write_text(html.read_text().replace("</body>", f"{script}</body>"))
    # subprocess: a real browser lays the report out
    shown = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            "--window-size=1400,1000",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    found = re.search(r'<pre id="width">(\d+) (\d+) (\d+) (\d+)</pre>', shown.stdout)
    assert found, shown.stdout[-2000:]
    page, window, table, box = (int(x) for x in found.groups())
    assert window == 1400
    assert page <= window
    assert table <= box  # the runs table needs no sideways scrolling of its own
    texts = re.search(r"<pre id=\"texts\">(\[.*?)</pre>", shown.stdout, re.S)
    assert texts, shown.stdout[-2000:]
    figures = json.loads(unescape(texts.group(1)))
    assert len(figures) == len(report.figures) == 4  # sparsity, latency, memory, curves
    for figure, drawn in zip(report.figures, figures, strict=True):
        assert drawn["texts"] > 10, figure.title  # ticks, axis titles, legend entries
        assert drawn["faults"] == [], figure.title


def test_runs_table_numbers_group_thousands_instead_of_exponents() -> None:
    from hpml.report.page import _number

    assert _number(17_720.4) == "17,720"
    assert _number(0.69321) == "0.6932"
    assert _number(float("nan")) == "nan"
