"""The report's tables, from what hpml's callbacks logged, one module a table, each drawn only
where runs carry its data."""

from hpml.report.studies.baseline import against_baseline
from hpml.report.studies.before_after import before_after
from hpml.report.studies.cells import Table, columns, runs_cell, spread
from hpml.report.studies.pruning import TEXTS, pruning
from hpml.report.studies.repeats import repeats

TABLES = (pruning, before_after)  # the studies' tables, each made from the groups and artifacts

__all__ = [
    "TABLES",
    "TEXTS",
    "Table",
    "against_baseline",
    "before_after",
    "columns",
    "repeats",
    "runs_cell",
    "spread",
]
