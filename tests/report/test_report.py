"""``python -m hpml.report`` on a real sweep: its sections, its tables' rows, valid SVG figures
with tooltips, the failed job marked, and the files logged to the sweep's parent run."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.conftest import QUICK, run_cli, run_module


class Page(HTMLParser):
    """The headings, the runs table's rows (with their class) and inline SVGs of a report
    page (the runs table: its shown columns, not those folded below it)."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.rows: list[tuple[str | None, list[str]]] = []
        self.svgs = 0
        self._tag: str | None = None
        self._row: list[str] | None = None
        self._row_class: str | None = None
        self._in_runs = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "wbr":  # a line-break hint inside a heading: the cell goes on
            return
        self._tag = tag
        if tag == "table":
            self._in_runs = dict(attrs).get("id") == "runs"
        elif tag == "tr" and self._in_runs:
            self._row, self._row_class = [], dict(attrs).get("class")
        elif tag in ("td", "th") and self._row is not None:
            self._row.append("")
        elif tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._row is not None:
            self.rows.append((self._row_class, self._row))
            self._row = None
        elif tag == "table":
            self._in_runs = False
        self._tag = None

    def handle_data(self, data: str) -> None:
        if self._tag == "h2":
            self.headings.append(data)
        elif self._tag in ("td", "th") and self._row is not None:
            self._row[-1] += data


def report(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run_module("hpml.report", list(args), root)


@pytest.mark.slow
def test_report_of_a_sweep_with_a_failed_job(root):
    # job 0 fails in its first epoch; jobs 1 and 2 never reach the epoch their number names
    fail = [
        "+callbacks.fail._target_=tests.helpers.FailAtEpoch",
        "+callbacks.fail.epoch=${hydra:job.num}",
    ]
    # 128 samples: two steps at batch 64, one after the throughput's warm-up step
    sweep = run_cli(
        ["-m", "model=vae", *QUICK, "data.train_samples=128", "data.batch_size=16,32,64", *fail],
        root,
    )
    assert sweep.returncode == 1, sweep.stderr[-3000:]
    result = report(root, "--last")
    assert result.returncode == 0, result.stderr[-3000:]
    html_path, md_path = (Path(line.split()[2]) for line in result.stdout.splitlines()[:2])
    page = Page()
    page.feed(html_path.read_text())
    assert page.headings == [
        "Runs",
        "Throughput and step time vs batch size",
        "Memory breakdown",
        "Learning curves",
    ]
    head, *rows = page.rows
    # the keys that differ: the one swept, and the failure's epoch (the job's number)
    assert head[1][:4] == ["run", "status", "callbacks.fail.epoch", "data.batch_size"]
    assert "train/throughput (samples/s)" in head[1]
    assert len(rows) == 3
    failed = [cells for css, cells in rows if css == "failed"]
    assert len(failed) == 1 and failed[0][1].startswith("FAILED: ")
    assert "injected failure at epoch 0" in failed[0][1] and failed[0][2:4] == ["0", "16"]
    assert page.svgs == 3
    figures = sorted((md_path.parent / "figures").glob("*.svg"))
    assert len(figures) == 3
    for figure in figures:  # valid SVG; every point names its run in a tooltip
        svg = ET.parse(figure).getroot()
        tips = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title") if t.text]
        assert any("data.batch_size=" in tip for tip in tips), figure
    md = md_path.read_text()
    assert md.count("\n| job ") == 3 and "![Learning curves](figures/3.svg)" in md

    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    (parent,) = client.search_runs(["1"], "tags.`hpml.sweep_parent` = 'true'")
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert logged == {"report/report.html", "report/report.md", "report/figures", "report/tables"}

    children = client.search_runs(["1"], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    ids = [r.info.run_id for r in children if r.info.status == "FINISHED"]
    assert len(ids) == 2
    by_ids = report(root, "--runs", *ids)
    assert by_ids.returncode == 0, by_ids.stderr[-3000:]
    page = Page()
    page.feed(Path(by_ids.stdout.split()[2]).read_text())
    assert len(page.rows) == 3  # heading and the two finished runs
    filtered = report(root, "--filter", "params.`data.batch_size` = '64'")
    assert filtered.returncode == 0, filtered.stderr[-3000:]
    opens_in_a_browser(html_path, root / "report.png")


def opens_in_a_browser(html: Path, png: Path) -> None:
    """Headless Chromium shows ``html`` with no console message and draws text and plots."""
    from PIL import Image

    if shutil.which("chromium") is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium) for the browser check")
    shown = screenshot(html, png)
    assert shown.returncode == 0, shown.stderr[-3000:]
    console = [line for line in shown.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    image = Image.open(png).convert("L")
    assert image.size == (1280, 2400)
    low, high = image.getextrema()
    assert high - low > 100  # text and plots drawn, not a blank page
    dark = sum(1 for value in image.getdata() if value < 128)
    assert dark > 0.005 * image.size[0] * image.size[1]


def test_report_names_a_run_that_is_no_sweep(root):
    result = report(root, "--sweep", "0123456789abcdef")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("hpml: error: unknown run id")


def test_a_store_that_is_not_there_or_not_a_database_is_one_line_and_left_alone(tmp_path, capsys):
    from hpml.report.__main__ import main

    missing, text = tmp_path / "mlflow.db", tmp_path / "notes.db"
    text.write_text("not a database\n")
    assert main(["--tracking-uri", f"sqlite:///{missing}"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"hpml: error: no MLflow store at {missing}: run `python -m hpml")
    assert not missing.exists()  # a report never makes an empty store
    assert main(["--tracking-uri", f"sqlite:///{text}"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{text} cannot be read as an SQLite database" in line


def screenshot(html: Path, png: Path) -> subprocess.CompletedProcess:
    """Headless Chromium opens ``html`` and saves what it shows; its console goes to stderr."""
    # subprocess: a real browser renders the report
    return subprocess.run(
        [
            shutil.which("chromium") or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2400",
            f"--screenshot={png}",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
