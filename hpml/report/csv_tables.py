"""Every table of a report as CSV beside it (``tables/<name>.csv``): plain numbers at full
precision, units in the column names, empty for what a run did not log."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hpml.report.comparisons import COLUMNS

if TYPE_CHECKING:
    from hpml.report.comparisons import Comparison
    from hpml.report.studies import Table
    from hpml.report.table import Row

FOLDER = "tables"
_GROUPED = re.compile(r"^-?\d{1,3}(,\d{3})+$")  # a count as table.number groups it


class Tabled(Protocol):
    """What the CSV files hold of a :class:`hpml.report.page.Report`, which imports this."""

    keys: list[str]
    columns: list[str]
    rows: list[Row]
    tables: list[Table]
    lead: list[Table]
    comparisons: list[Comparison]


def plain(cell: object) -> object:
    """A CSV cell: None as empty, floats in full (repr round-trips), ``1,302,400`` ungrouped."""
    if cell is None:
        return ""
    if isinstance(cell, float):
        return repr(cell)
    if isinstance(cell, str) and _GROUPED.match(cell):
        return cell.replace(",", "")
    return cell


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows([plain(cell) for cell in row] for row in rows)
    return path


def slug(title: str) -> str:
    """``Fused arrays (HFTA, study 4)`` -> ``fused_arrays_hfta_study_4``: a table's file name."""
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "table"


def write(folder: Path, report: Tabled) -> list[Path]:
    """``runs.csv``, a file per table of ``report`` and ``comparisons.csv`` in ``folder/tables``."""
    out = folder / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    runs = [
        [
            row.name,
            row.run_id,
            row.status,
            row.error,
            *(row.keys[k] for k in report.keys),
            *(row.metrics.get(c) for c in report.columns),
        ]
        for row in report.rows
    ]
    written = [
        write_csv(
            out / "runs.csv",
            ["run", "run_id", "status", "error", *report.keys, *report.columns],
            runs,
        )
    ]
    for table in [*report.lead, *report.tables]:
        columns, rows = table.data or (table.headings, table.rows)
        written.append(write_csv(out / f"{table.name or slug(table.title)}.csv", columns, rows))
    written.append(
        write_csv(out / "comparisons.csv", COLUMNS, [c.row() for c in report.comparisons])
    )
    return written
