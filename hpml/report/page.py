"""A report as one self-contained HTML page (SVG inline, no script, opens offline) and as
Markdown with its figures as SVG files beside it.

The page opens with a header (:func:`header`: what ran, from which command and commit, on
which machine, under what load, when), so a reader can judge its numbers without MLflow. It
fits a 1400-px window: the runs table shows its status, swept keys and headline metrics, the
rest of its columns folded below it; numbers carry human units (MB, MFLOP), as the figures do.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.report.canvas import UNITS, scaled
from hpml.report.csv_tables import write as write_csv
from hpml.report.figures import Figure
from hpml.report.groups import Comparison
from hpml.report.studies import Table
from hpml.report.table import Row, number, value

if TYPE_CHECKING:
    from mlflow.entities import Run

# metrics the runs table shows beside the swept keys, when the runs carry them: quality and
# speed; every other column is folded below it
KEY_METRICS = (
    "val/loss",
    "val/acc",
    "test/acc",
    "train/throughput_samples_per_s",
    "train/step_time_p50_ms",
)
SHOWN = 7  # metric columns beside the swept keys: the table fits 1400 px with a few keys

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
  padding: 0 1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { vertical-align: bottom; }
th:first-child, td:first-child { text-align: left; white-space: nowrap; }
td.status { text-align: left; max-width: 24em; overflow-wrap: break-word; }
tr.failed td { background: #fde2e2; }
dl.header { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em;
  font-size: 0.9em; margin: 0.5em 0 1.5em; }
dl.header dt { font-weight: 600; } dl.header dd { margin: 0; overflow-wrap: anywhere; }
details { margin: 0.5em 0; } summary { cursor: pointer; color: #333; }
p.note { color: #555; font-size: 0.9em; }
figure { margin: 1.5em 0; } figcaption { color: #555; font-size: 0.9em; }
svg { max-width: 100%; height: auto; } div.wide { overflow-x: auto; }
"""


def _one(values: Sequence[str], what: str = "runs") -> str:
    """Values the runs share as one; differing ones listed, said to differ."""
    found = list(dict.fromkeys(v for v in values if v))
    if len(found) <= 1:
        return found[0] if found else ""
    return f"{'; '.join(found)} (differs between {what})"


def _tag(runs: Sequence[Run], tag: str) -> list[str]:
    return [run.data.tags.get(tag, "") for run in runs]


def _when(runs: Sequence[Run]) -> str:
    starts = [r.info.start_time for r in runs if r.info.start_time]
    ends = [r.info.end_time or r.info.start_time for r in runs if r.info.start_time]
    if not starts:
        return ""
    first = datetime.fromtimestamp(min(starts) / 1000, UTC)
    last = datetime.fromtimestamp(max(ends) / 1000, UTC)
    minutes = (last - first).total_seconds() / 60
    to = last.strftime("%H:%M" if last.date() == first.date() else "%Y-%m-%d %H:%M")
    return f"{first:%Y-%m-%d %H:%M} to {to} UTC ({minutes:.0f} min)"


def _load(runs: Sequence[Run]) -> str:
    """The load average each run found at its start, other processes' CPU share during timed
    work and the runs tagged noisy, as far as the runs recorded them."""
    parts = []
    ones = []
    for text in _tag(runs, "hpml.load_avg_1m_5m_15m"):
        try:
            ones.append(float(text.split()[0]))
        except (IndexError, ValueError):
            continue
    cores = _one(_tag(runs, "hpml.cpu_count"))
    if ones:
        per = f" on {cores} logical CPUs" if cores else ""
        parts.append(
            f"1-min load average at run start {min(ones):.2f} to {max(ones):.2f} "
            f"(median {statistics.median(ones):.2f}, {len(ones)} runs){per}"
        )
    other = [v for r in runs if (v := r.data.metrics.get("noise/other_cpu_pct")) is not None]
    if other:
        parts.append(
            f"other processes' CPU during timed work: median {statistics.median(other):.0f} %, "
            f"at most {max(other):.0f} %"
        )
    noisy = [r for r in runs if r.data.tags.get("hpml.noisy", "").lower() == "true"]
    if any("hpml.noisy" in r.data.tags for r in runs):
        reasons = [r for r in _tag(noisy, "hpml.noisy.reason") if r]
        example = (
            f", e.g. {reasons[0]}; each run's reason in its hpml.noisy.reason tag"
            if reasons
            else ""
        )
        parts.append(f"{len(noisy)} of {len(runs)} runs tagged noisy{example}")
    return "; ".join(parts)


def header(
    runs: Sequence[Run], parent: Run | None, experiment: str, keys: Sequence[str]
) -> list[tuple[str, str]]:
    """The page's header, ``(field, text)`` pairs read back from the runs' tags
    (:mod:`hpml.tracking.tags`): experiment and swept keys with their values, the command,
    git commit, host, CPU and GPU, torch version, load during the sweep and its dates. A
    field the runs did not record is left out; one that differs between runs lists each
    value."""
    swept = "; ".join(f"{k} = {', '.join(dict.fromkeys(value(r, k) for r in runs))}" for k in keys)
    sweep_command = parent.data.tags.get("hpml.sweep_command") if parent is not None else None
    command = (
        sweep_command or _one(_tag(runs, "hpml.sweep_command")) or _one(_tag(runs, "hpml.command"))
    )
    commits = [
        f"{c} (uncommitted changes)" if d == "True" else c
        for c, d in zip(_tag(runs, "hpml.git_commit"), _tag(runs, "hpml.git_dirty"), strict=True)
    ]
    devices = _tag(runs, "hpml.device")
    gpus = [d.removeprefix("cuda: ") for d in devices if d.startswith("cuda")]
    cpus = (
        _tag(runs, "hpml.cpu_model")
        if any(_tag(runs, "hpml.cpu_model"))
        else [d.removeprefix("cpu: ") for d in devices if d.startswith("cpu")]
    )
    threads = _one(_tag(runs, "hpml.cpu_threads"))
    cpu = _one(cpus)
    if cpu and _one(_tag(runs, "hpml.cpu_count")):
        cpu += f", {_one(_tag(runs, 'hpml.cpu_count'))} logical CPUs"
    if cpu and threads:
        cpu += f", torch threads: {threads}"
    torch_version = _one(_tag(runs, "hpml.torch_version"))
    cuda = _one([c for c in _tag(runs, "hpml.cuda_version") if c != "None"])
    if torch_version and cuda:
        torch_version += f" (CUDA {cuda})"
    fields = [
        ("experiment", experiment),
        ("swept", swept or "nothing (runs chosen one by one)" if parent is None else swept),
        ("command", command),
        ("git commit", _one(commits)),
        ("host", _one(_tag(runs, "hpml.host"))),
        ("OS", _one(_tag(runs, "hpml.os"))),
        ("CPU", cpu),
        ("GPU", _one(gpus)),
        ("torch", torch_version),
        ("load", _load(runs)),
        ("date", _when(runs)),
    ]
    return [(name, text) for name, text in fields if text]


@dataclass
class Report:
    """What a report says: a title, a summary line, the runs table and its figures."""

    title: str
    summary: str
    keys: list[str]
    columns: list[str]
    rows: list[Row]
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)  # tables/comparisons.csv
    header: list[tuple[str, str]] = field(default_factory=list)  # :func:`header`

    def _units(self, columns: Sequence[str]) -> list[tuple[float, str]]:
        """Each metric column's divisor and heading in a human unit (MB, MFLOP/sample)."""
        return [scaled(c, [r.metrics[c] for r in self.rows if c in r.metrics]) for c in columns]

    def _cells(self, row: Row, columns: Sequence[str] | None = None) -> list[str]:
        columns = self.columns if columns is None else columns
        status = row.status if row.error is None else f"{row.status}: {row.error[:120]}"
        metrics = [
            _number(row.metrics[c] / factor) if c in row.metrics else ""
            for c, (factor, _) in zip(columns, self._units(columns), strict=True)
        ]
        return [row.name, status, *(row.keys[k] for k in self.keys), *metrics]

    def _headings(self, columns: Sequence[str]) -> list[str]:
        return ["run", "status", *self.keys, *(h for _, h in self._units(columns))]

    @property
    def key_columns(self) -> list[str]:
        """The runs table's shown metrics: :data:`KEY_METRICS` the runs carry and what each
        model measured after its optimisation step (``prune_after/latency_b1_ms``), at most
        :data:`SHOWN`; where they carry none of those, its first three columns."""
        shown = [c for c in KEY_METRICS if c in self.columns]
        shown += [c for c in self.columns if c.split("/", 1)[0].endswith("_after")]
        return shown[:SHOWN] or self.columns[:3]

    def _runs_html(self, columns: Sequence[str], table_id: str) -> str:
        head = "".join(
            f"<th>{escape(h).replace('/', '/<wbr>')}</th>" for h in self._headings(columns)
        )
        body = []
        for row in self.rows:
            css = ' class="failed"' if row.status == "FAILED" else ""
            cells = [f"<td>{escape(cell)}</td>" for cell in self._cells(row, columns)]
            cells[1] = f'<td class="status">{escape(self._cells(row, ())[1])}</td>'
            body.append(f'<tr{css} title="run {escape(row.run_id)}">{"".join(cells)}</tr>')
        return (
            f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

    def _header_html(self) -> str:
        if not self.header:
            return ""
        rows = "".join(
            f"<dt>{escape(name)}</dt><dd>"
            + (f"<code>{escape(text)}</code>" if name == "command" else escape(text))
            + "</dd>"
            for name, text in self.header
        )
        return f'<dl class="header">{rows}</dl>'

    def html(self) -> str:
        folded = [c for c in self.columns if c not in self.key_columns]
        more = (
            f"<details><summary>All {len(self.columns)} metric columns of every run "
            f"({len(folded)} more: {escape(', '.join(folded[:6]))}"
            f"{', ...' if len(folded) > 6 else ''})</summary>"
            f"{self._runs_html(self.columns, 'runs-all')}</details>"
            if folded
            else ""
        )
        runs = (
            f"<section><h2>Runs</h2>{self._runs_html(self.key_columns, 'runs')}{more}"
            f'<p class="note">Hover a row for its run id. {escape(UNITS)}</p></section>'
        )
        tables = "".join(_table_html(t) for t in self.tables)
        figures = "".join(
            f"<section><h2>{escape(f.title)}</h2><figure>{f.svg}"
            f"<figcaption>{escape(f.caption)}</figcaption></figure></section>"
            for f in self.figures
        )
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(self.title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(self.title)}</h1>{self._header_html()}<p>{escape(self.summary)}</p>"
            f"{runs}{tables}{figures}</body></html>\n"
        )

    def markdown(self, figure_dir: str) -> str:
        """Markdown whose figures are ``<figure_dir>/<n>.svg`` (:meth:`write` puts them there)."""
        heads = self._headings(self.columns)
        lines = [f"# {self.title}", ""]
        lines += [
            f"- **{name}**: " + (f"`{t}`" if name == "command" else t) for name, t in self.header
        ]
        lines += ["", self.summary, "", "## Runs", "", UNITS, ""]
        lines.append("| " + " | ".join(heads) + " |")
        lines.append("|" + "|".join("---" for _ in heads) + "|")
        for row in self.rows:
            cells = [cell.replace("|", "\\|") for cell in self._cells(row)]
            lines.append("| " + " | ".join(cells) + " |")
        for table in self.tables:
            lines += ["", f"## {table.title}", "", table.caption, ""]
            lines.append("| " + " | ".join(table.headings) + " |")
            lines.append("|" + "|".join("---" for _ in table.headings) + "|")
            lines += [
                "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table.rows
            ]
            for heading, text in table.texts:
                lines += ["", f"{heading}:", "", "```", text.rstrip(), "```"]
        for index, figure in enumerate(self.figures):
            lines += ["", f"## {figure.title}", "", figure.caption, ""]
            lines.append(f"![{figure.title}]({figure_dir}/{index + 1}.svg)")
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> tuple[Path, Path]:
        """``report.html``, ``report.md``, ``figures/<n>.svg`` and ``tables/<name>.csv`` in
        ``folder``."""
        (folder / "figures").mkdir(parents=True, exist_ok=True)
        for index, figure in enumerate(self.figures):
            (folder / "figures" / f"{index + 1}.svg").write_text(figure.svg)
        html, md = folder / "report.html", folder / "report.md"
        html.write_text(self.html())
        write_csv(folder, self)
        md.write_text(self.markdown("figures"))
        return html, md


def _number(value: float) -> str:
    """A runs-table cell: :func:`~hpml.report.table.number`, with 10,000 and more grouped in
    thousands rather than in exponent notation (``17,720``, not ``1.772e+04``)."""
    if math.isfinite(value) and abs(value) >= 1e4:
        return f"{value:,.0f}"
    return number(value)


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headings)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    texts = "".join(
        f"<details><summary>{escape(h)}</summary><pre>{escape(t)}</pre></details>"
        for h, t in table.texts
    )
    return (
        f"<section><h2>{escape(table.title)}</h2><p>{escape(table.caption)}</p>"
        f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        f"</table></div>{texts}</section>"
    )
