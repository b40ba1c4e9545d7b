"""A report as one self-contained HTML page (SVG inline, no script, opens offline) and as
Markdown with its figures as SVG files beside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from hpml.report.csv_tables import write as write_csv
from hpml.report.figures import Figure
from hpml.report.groups import Comparison
from hpml.report.studies import Table
from hpml.report.table import Row, headings, number

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th:first-child, td:first-child { text-align: left; white-space: nowrap; }
tr.failed td { background: #fde2e2; }
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

    def _cells(self, row: Row) -> list[str]:
        status = row.status if row.error is None else f"{row.status}: {row.error[:120]}"
        metrics = [number(row.metrics[c]) if c in row.metrics else "" for c in self.columns]
        return [row.name, status, *(row.keys[k] for k in self.keys), *metrics]

    def html(self) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in headings(self.keys, self.columns))
        body = []
        for row in self.rows:
            css = ' class="failed"' if row.status == "FAILED" else ""
            cells = "".join(f"<td>{escape(cell)}</td>" for cell in self._cells(row))
            body.append(f'<tr{css} title="run {escape(row.run_id)}">{cells}</tr>')
        tables = "".join(_table_html(t) for t in self.tables)
        figures = "".join(
            f"<section><h2>{escape(f.title)}</h2><figure>{f.svg}"
            f"<figcaption>{escape(f.caption)}</figcaption></figure></section>"
            for f in self.figures
        )
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(self.title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(self.title)}</h1><p>{escape(self.summary)}</p>"
            f'<section><h2>Runs</h2><div class="wide"><table id="runs"><thead><tr>{head}</tr>'
            f"</thead><tbody>{''.join(body)}</tbody></table></div></section>{tables}{figures}"
            "</body></html>\n"
        )

    def markdown(self, figure_dir: str) -> str:
        """Markdown whose figures are ``<figure_dir>/<n>.svg`` (:meth:`write` puts them there)."""
        heads = headings(self.keys, self.columns)
        lines = [f"# {self.title}", "", self.summary, "", "## Runs", ""]
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
