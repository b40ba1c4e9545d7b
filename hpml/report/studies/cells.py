"""What the studies' tables share: :class:`Table`, and cells of a group of repeats, a row built
as ``(heading, cell)`` records so a heading never drifts from its cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from hpml.analysis.stats import median_ci
from hpml.names import SIDES, latency, side
from hpml.report.comparisons import Comparison
from hpml.report.groups import Group
from hpml.report.table import number

if TYPE_CHECKING:
    from mlflow.entities import Run

T = TypeVar("T")
# ``text(run, artifact path)``: an artifact's text, None when the run has none
ReadText = Callable[["Run", str], "str | None"]
B1_SPEEDUP = tuple(f"speedup_b1_{s}" for s in ("x", "ci_low_x", "ci_high_x", "n", "verdict"))
SPREAD = (
    "A number that varies between a config's repeats is their median [low, high]: the "
    "order-statistic 95% interval of the median, or with fewer than 6 repeats [min, max], whose "
    "coverage the runs column says (75% for 3, 88% for 4, 94% for 5)."
)
VERDICTS = (
    "Speed-ups: before / after (> 1: faster), as the step timed both side by side in rounds: "
    "ratio [95% interval] verdict (n rounds); over repeats, the median of their speed-ups "
    "[interval over the repeats] (n repeats). Verdict: faster or slower when the interval lies "
    "above or below 1, within noise when it contains 1 or rests on one value; over repeats, "
    "faster or slower only when every repeat, timed side by side, said so. A run tagged "
    "hpml.noisy keeps its verdict (each round's load hit both sides and widened the "
    "interval) and its cell says so."
)

# how a cell of two groups' runs reads (``why``: what else a one-run side should know)
GROUP_VERDICT = (
    "the ratio of the two groups' medians [95% bootstrap interval over their repeats] verdict "
    "(n: the smaller group's runs). Faster or slower when the interval lies above or below 1; "
    "within noise when it contains 1, a side has one run{why}, or a run was tagged hpml.noisy."
)


@dataclass(frozen=True)
class Table:
    """A report table, and preformatted texts shown folded under it; ``name`` names its CSV
    (``tables/<name>.csv``), ``data`` its plain columns and rows there (default: the cells)."""

    title: str
    caption: str
    headings: list[str]
    rows: list[list[str]]
    texts: list[tuple[str, str]] = field(default_factory=list)  # (heading, text)
    name: str = ""
    data: tuple[list[str], list[list[object]]] | None = None


def columns(records: list[list[tuple[str, T]]]) -> tuple[list[str], list[list[T]]]:
    """Rows of ``(heading, cell)`` records as headings (the first row's) and rows of cells."""
    return [h for h, _ in records[0]], [[c for _, c in row] for row in records]


def spread(values: Sequence[float]) -> str:
    """A cell of a group's values: the value when they agree, else ``median [low, high]``."""
    if not values:
        return ""
    if len(set(values)) == 1:
        return number(values[0])
    ci = median_ci(values)
    return f"{number(ci.median)} [{number(ci.low)}, {number(ci.high)}]"


def runs_cell(group: Group) -> str:
    """``3 (75% intervals): job 0, job 3, job 6``: a row's n, its intervals' coverage, its runs."""
    n = len(group.runs)
    if n == 1:
        return group.names
    return f"{n} ({median_ci(list(range(n))).coverage:.0%} intervals): {group.names}"


def pair(group: Group, before: str, after: str) -> str:
    """``before -> after``: two metrics' cells, empty unless the group carries both."""
    b, a = group.values(before), group.values(after)
    return f"{spread(b)} -> {spread(a)}" if b and a else ""


def latency_cells(group: Group, step: str) -> list[tuple[str, str]]:
    """Latency at batch 1 before and after ``step``: repeats' median [interval], or a single
    run's median with its IQR over rounds."""
    cells = []
    for when in SIDES:
        values = group.values(latency(side(step, when)))
        iqr = group.runs[0].data.metrics.get(latency(side(step, when), part="_iqr"))
        if len(values) == 1 and iqr is not None:
            cell = f"{number(values[0])} (IQR {number(iqr)})"
        else:
            cell = spread(values)
        cells.append((f"latency b1 {when} (ms)", cell))
    return cells


def batches(groups: list[Group], steps: Sequence[str]) -> list[int]:
    """The batch sizes any group timed a step's before/after at: a speed-up column each."""
    return sorted({b for g in groups for s, b in g.in_run if s in steps})


def param(group: Group, key: str) -> str:
    return group.runs[0].data.params.get(key, "")


def median(group: Group, name: str) -> float | None:
    ci = group.interval(name)
    return None if ci is None else ci.median


def b1_data(group: Group, step: str, found: list[Comparison]) -> list[tuple[str, object]]:
    """The CSV's batch-1 columns of ``step``: latencies, the speed-up, its interval, verdict."""
    b1 = next((c for c in found if c.batch == 1), None)
    said = (None,) * 5 if b1 is None else (b1.ratio, b1.ci_low, b1.ci_high, b1.n, b1.verdict)
    latencies = [(f"latency_b1_{w}_ms", median(group, latency(side(step, w)))) for w in SIDES]
    return latencies + list(zip(B1_SPEEDUP, said, strict=True))


def timing(
    group: Group, step: str, batches: list[int]
) -> tuple[list[tuple[str, str]], list[tuple[str, object]]]:
    """``step``'s timing as shown (latency at batch 1 before and after, a speed-up per batch
    of ``batches``) and as the CSV holds it (:func:`b1_data`)."""
    timed = sorted(b for s, b in group.in_run if s == step)
    found = [c for b in timed if (c := group.speedup(step, b)) is not None]
    cells = {c.batch: c.cell() for c in found}
    shown = [(f"speed-up b{b} (x, before/after)", cells.get(b, "")) for b in batches]
    return [*latency_cells(group, step), *shown], b1_data(group, step, found)
