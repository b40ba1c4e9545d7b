"""A report as one self-contained HTML page (SVG inline, no script, opens offline) and as
Markdown with its figures as SVG files beside it: a header (what ran, where, when), the tables
that lead it (``--by``), the runs (headline columns shown, the rest folded), tables, figures.
Every table is also CSV beside it (``tables/<name>.csv``): plain numbers at full precision,
units in the column names, empty for what a run did not log.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from hpml.names import CANARY_SLOWDOWN, STEP_TIME, TEST_ACC, THROUGHPUT, VAL_ACC, VAL_LOSS
from hpml.report.canvas import UNITS, Figure, scaled
from hpml.report.comparisons import COLUMNS, Comparison
from hpml.report.studies import Table
from hpml.report.table import Row, number

# metrics the runs table shows beside the swept keys, when the runs carry them: quality and
# speed; every other column is folded below it
KEY_METRICS = (VAL_LOSS, VAL_ACC, TEST_ACC, THROUGHPUT, STEP_TIME)
SHOWN = 7  # metric columns beside the swept keys: the table fits 1400 px with a few keys
_GROUPED = re.compile(r"^-?\d{1,3}(,\d{3})+$")  # a count as table.number groups it

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
    header: list[tuple[str, str]] = field(default_factory=list)  # hpml.report.header
    lead: list[Table] = field(default_factory=list)  # before the runs: --by, --baseline

    def _units(self, columns: Sequence[str]) -> list[tuple[float, str]]:
        """Each metric column's divisor and heading in a human unit."""
        return [scaled(c, [r.metrics[c] for r in self.rows if c in r.metrics]) for c in columns]

    def _cells(self, row: Row, columns: Sequence[str] | None = None) -> list[str]:
        columns = self.columns if columns is None else columns
        status = row.status if row.error is None else f"{row.status}: {row.error[:120]}"
        status += f"; {row.machine}" if row.machine else ""
        metrics = [
            _number(row.metrics[c] / factor) if c in row.metrics else ""
            for c, (factor, _) in zip(columns, self._units(columns), strict=True)
        ]
        return [row.name, status, *(row.keys[k] for k in self.keys), *metrics]

    def _headings(self, columns: Sequence[str]) -> list[str]:
        return ["run", "status", *self.keys, *(h for _, h in self._units(columns))]

    @property
    def key_columns(self) -> list[str]:
        """The runs table's shown metrics: :data:`KEY_METRICS` and each step's ``*_after/*``
        measures, at most :data:`SHOWN`; where the runs carry none, the first three columns."""
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
            cells[1] = cells[1].replace("<td>", '<td class="status">', 1)
            body.append(f'<tr{css} title="run {escape(row.run_id)}">{"".join(cells)}</tr>')
        return (
            f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

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
        header = "".join(
            f"<dt>{escape(name)}</dt><dd>"
            + (f"<code>{escape(text)}</code>" if name == "command" else escape(text))
            + "</dd>"
            for name, text in self.header
        )
        header = f'<dl class="header">{header}</dl>' if header else ""
        lead = "".join(_table_html(t) for t in self.lead)
        tables = "".join(_table_html(t) for t in self.tables)
        figures = "".join(
            f"<section><h2>{escape(f.title)}</h2><figure>{f.svg}"
            f"<figcaption>{escape(f.caption)}</figcaption></figure></section>"
            for f in self.figures
        )
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(self.title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(self.title)}</h1>{header}<p>{escape(self.summary)}</p>"
            f"{lead}{runs}{tables}{figures}</body></html>\n"
        )

    def markdown(self) -> str:
        """Markdown whose figures are ``figures/<n>.svg`` (:meth:`write` puts them there)."""
        lines = [f"# {self.title}", ""]
        lines += [
            f"- **{name}**: " + (f"`{t}`" if name == "command" else t) for name, t in self.header
        ]
        lines += ["", self.summary]
        for table in self.lead:
            lines += _table_md(table)
        lines += ["", "## Runs", "", UNITS, ""]
        lines += _md_rows(self._headings(self.columns), [self._cells(r) for r in self.rows])
        for table in self.tables:
            lines += _table_md(table)
        for index, figure in enumerate(self.figures):
            lines += ["", f"## {figure.title}", "", figure.caption, ""]
            lines.append(f"![{figure.title}](figures/{index + 1}.svg)")
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> tuple[Path, Path]:
        """``report.html``, ``report.md``, ``figures/*.svg`` and ``tables/*.csv`` in ``folder``."""
        (folder / "figures").mkdir(parents=True, exist_ok=True)
        for index, figure in enumerate(self.figures):
            (folder / "figures" / f"{index + 1}.svg").write_text(figure.svg)
        html, md = folder / "report.html", folder / "report.md"
        html.write_text(self.html())
        md.write_text(self.markdown())
        out = folder / "tables"  # runs.csv, a file per table and comparisons.csv
        out.mkdir(exist_ok=True)
        # a judged canary: its slowdown against its peers, and the flag (empty: not slow)
        judged = any(row.slowdown is not None for row in self.rows)
        machine = ["machine", CANARY_SLOWDOWN] if judged else []
        runs = [
            [
                row.name,
                row.run_id,
                row.status,
                row.error,
                *(row.keys[k] for k in self.keys),
                *(row.metrics.get(c) for c in self.columns),
                *([row.machine, row.slowdown] if judged else []),
            ]
            for row in self.rows
        ]
        columns = ["run", "run_id", "status", "error", *self.keys, *self.columns, *machine]
        _csv(out / "runs.csv", columns, runs)
        for table in [*self.lead, *self.tables]:
            columns, rows = table.data or (table.headings, table.rows)
            _csv(out / f"{table.name or slug(table.title)}.csv", columns, rows)
        _csv(out / "comparisons.csv", COLUMNS, [c.row() for c in self.comparisons])
        return html, md


def _number(value: float) -> str:
    """A runs-table cell: :func:`~hpml.report.table.number`, 10,000 and more grouped in
    thousands (``17,720``, not ``1.772e+04``)."""
    return number(round(value) if math.isfinite(value) and abs(value) >= 1e4 else value)


def _md_rows(headings: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headings) + " |", "|" + "|".join("---" for _ in headings) + "|"]
    return lines + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]


def _table_md(table: Table) -> list[str]:
    lines = ["", f"## {table.title}", "", table.caption, ""]
    lines += _md_rows(table.headings, table.rows)
    for heading, text in table.texts:
        lines += ["", f"{heading}:", "", "```", text.rstrip(), "```"]
    return lines


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


def plain(cell: object) -> object:
    """A CSV cell: None as empty, floats in full (repr round-trips), ``1,302,400`` ungrouped."""
    if cell is None:
        return ""
    if isinstance(cell, float):
        return repr(cell)
    if isinstance(cell, str) and _GROUPED.match(cell):
        return cell.replace(",", "")
    return cell


def _csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows([plain(cell) for cell in row] for row in rows)


def slug(title: str) -> str:
    """``Fused arrays (HFTA, study 4)`` -> ``fused_arrays_hfta_study_4``: a table's file name."""
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "table"
