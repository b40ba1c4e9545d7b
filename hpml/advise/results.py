"""What advice says: one line per proposal, and after a try the table of predictions against
measurements, shown as a report section and written as CSV (``tables/advice.csv``)."""

from __future__ import annotations

from hpml.advise.rules import Proposal
from hpml.advise.trial import Tried
from hpml.names import THROUGHPUT, label
from hpml.report.comparisons import COLUMNS
from hpml.report.studies import Table
from hpml.report.studies.cells import GROUP_VERDICT

NAME = "advice"  # the table's CSV: tables/advice.csv
CSV = [
    "proposal",
    "bound",
    "predicted_x",
    "prediction",
    "how",
    "measured_x",
    "ci_low_x",
    "ci_high_x",
    "n",
    "verdict",
    "measured_over_predicted_x",
    "arm",
    "runs",
]


def line(proposal: Proposal, tried: Tried | None = None) -> str:
    """``data.num_workers=1 (input): predicted about 1.54x; measured 1.21x [1.05, 1.4]
    faster (n=2), 0.79 of the prediction``; untried: the prediction and how."""
    head = f"{proposal.text} ({proposal.bound}): predicted {proposal.predicted()}"
    if tried is None:
        return f"{head}: {proposal.how}"
    if tried.comparison is None:
        return f"{head}; {tried.said}"
    off = f", {tried.off:.2f} of the prediction" if tried.off is not None else ""
    return f"{head}; measured {tried.comparison.cell()}{off}"


def table(tried: list[Tried], original: str) -> Table:
    """The try's table: a row per proposal with its prediction, how, its arm's measured ratio
    to the original on train throughput with interval and verdict, and measured / predicted."""
    rows, data = [], []
    for t in tried:
        p, c = t.proposal, t.comparison
        measured = c.cell() if c is not None else t.said
        off = "" if t.off is None else f"{t.off:.3g}"
        rows.append([p.text, p.bound, p.predicted(), p.how, measured, off])
        said = dict(zip(COLUMNS, c.row(), strict=True)) if c is not None else {}
        data.append(
            [
                p.text,
                p.bound,
                p.gain,
                p.kind,
                p.how,
                said.get("ratio"),
                said.get("ci_low"),
                said.get("ci_high"),
                said.get("n"),
                said.get("verdict", t.said),
                t.off,
                t.arm,
                said.get("run"),
            ]
        )
    return Table(
        f"Advice for {original}: predicted and tried",
        f"A row per proposal for the bound of the run's training. Predicted: the gain in "
        f"{label(THROUGHPUT)} it predicts, 'at most' an upper bound, 'about' an estimate, and "
        f"how. Measured: the arm's over the original's, run side by side in one interleaved "
        f"sweep, {GROUP_VERDICT.format(why='')} A bound both sides share (input-bound, "
        f"host-bound) is the verdict where the arm does not change what feeds the input. Last: "
        f"measured / predicted (at most 1 for an upper bound that held).",
        [
            "proposal",
            "bound",
            "predicted",
            "how",
            "measured (x, arm/original) [95% interval]",
            "measured / predicted",
        ],
        rows,
        name=NAME,
        data=(CSV, data),
    )
