"""The baseline table: every config's speed against the baseline config's, with its verdict."""

from __future__ import annotations

from hpml.names import label
from hpml.report.comparisons import COLUMNS, Comparison
from hpml.report.groups import Group, plain
from hpml.report.studies.cells import GROUP_VERDICT, Table
from hpml.report.table import number

SEPARATE = " (separate runs are not timed side by side: repeat them with replicate=0,1,2)"


def against_baseline(comparisons: list[Comparison], base: Group | None) -> Table | None:
    """Every config's speed against the baseline config's, with interval and verdict."""
    if not comparisons or base is None:
        return None
    rows = [
        [
            c.comparison.split(" vs baseline ", 1)[0],
            label(c.measure),
            number(c.before),
            number(c.after),
            c.cell(),
        ]
        for c in comparisons
    ]
    rule = (
        "the first config that prunes, quantises and compiles nothing"
        if plain(base)
        else "the sweep's first config (each config prunes, quantises or compiles)"
    )
    return Table(
        "Each config against the baseline",
        f"Baseline: {base.label} ({base.names}), {rule}. Speed-up: the config's throughput / the "
        "baseline's, or the baseline's step time or latency / the config's (> 1: the config is "
        f"faster): {GROUP_VERDICT.format(why=SEPARATE)}",
        ["config", "measure", "baseline (median)", "config (median)", "speed-up (x)"],
        rows,
        name="baseline",
        data=(list(COLUMNS), [c.row() for c in comparisons]),
    )
