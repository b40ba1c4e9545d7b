"""The report's tables, from what hpml's callbacks logged: each only where runs carry it, one
module a table; every caption states each number's convention and every speed-up its interval
and verdict."""

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
