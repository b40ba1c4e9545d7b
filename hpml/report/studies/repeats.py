"""The repeats table: a row per config run more than once, each metric's median [interval]."""

from __future__ import annotations

from hpml.names import label
from hpml.report.groups import Group
from hpml.report.studies.cells import SPREAD, Table, runs_cell, spread


def repeats(groups: list[Group], columns: list[str]) -> Table | None:
    """One row per config repeated more than once: each metric column's median [interval]."""
    repeated = [g for g in groups if len(g.runs) > 1]
    if not repeated:
        return None
    shown = [c for c in columns if any(g.values(c) for g in repeated)]
    rows, plain = [], []
    for group in repeated:
        rows.append([group.label, runs_cell(group), *(spread(group.values(c)) for c in shown)])
        cells: list[object] = [group.label, group.ids, len(group.runs)]
        for c in shown:
            ci = group.interval(c)
            cells += [None] * 4 if ci is None else [ci.median, ci.low, ci.high, ci.n]
        plain.append(cells)
    return Table(
        "Repeats: median and interval per config",
        f"A row per config run more than once (runs differing only in replicate, or seed unless "
        f"the report was made --by-seed). {SPREAD}",
        ["config", "runs (n, interval coverage)", *(label(c) for c in shown)],
        rows,
        name="repeats",
        data=(
            [
                "config",
                "runs",
                "n",
                *(f"{c}{s}" for c in shown for s in ("", " ci_low", " ci_high", " n")),
            ],
            plain,
        ),
    )
