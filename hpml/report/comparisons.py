"""One comparison the report draws, with its verdict (:class:`Comparison`, a row of
``tables/comparisons.csv``), and the before/after comparisons a run's callbacks logged.

*In-run*: a step's before/after at batch N as its callback timed them side by side
(``S/speedup_b<N>_x``, its interval, rounds and the tag ``hpml.verdict.S.speedup_b<N>``). A run
that logged no interval is ``within noise`` with n=1. A noisy run keeps its interval's verdict:
each round timed both sides back to back, so the load widened the interval instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from hpml.analysis.stats import VERDICTS, WITHIN_NOISE, Interval, verdict
from hpml.names import AFTER, BEFORE, COUNT, NOISY_TAG, latency, side, speedup, verdict_tag

if TYPE_CHECKING:
    from mlflow.entities import Run

_IN_RUN = re.compile(
    r"^(?P<step>\w+?)(?:_before|_after)?/(?:latency|speedup)_b(?P<n>\d+)_(?:ms|x)$"
)


def noisy(run: Run) -> bool:
    return run.data.tags.get(NOISY_TAG, "").lower() == "true"


@dataclass(frozen=True)
class Comparison:
    """One comparison: ``ratio`` is a speed-up (> 1: ``after`` is faster), its interval, n, and
    the verdict; ``coverage`` the interval's own (< 0.95 for fewer than 6 repeats)."""

    run: str  # a run id; a group's run ids, space-separated
    comparison: str
    measure: str  # the metric (its unit in the name): `latency_b1_ms`, `train/throughput_...`
    before: float | None
    after: float | None
    ratio: float
    ci_low: float | None
    ci_high: float | None
    n: int
    verdict: str
    coverage: float = 0.95
    noisy: bool = False  # a run of either side was tagged hpml.noisy
    note: str = ""  # what else the reader must know: the sides' canaries differ (--by, --baseline)

    @property
    def timed_side_by_side(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None and self.n >= 2

    @property
    def step(self) -> str:
        return self.comparison.split(":", 1)[0]

    @property
    def batch(self) -> int:
        return int(self.measure.rsplit("_b", 1)[1].split("_", 1)[0])

    def row(self) -> list[object]:
        return [getattr(self, column) for column in COLUMNS]

    def cell(self, with_note: bool = True) -> str:
        """``2.91x [2.70, 3.10] faster (n=7)``; ``1.5x [no interval] — within noise (n=1)``;
        its note after a semicolon, unless not ``with_note``."""
        note = f"; {self.note}" if self.note and with_note else ""
        if not self.timed_side_by_side:
            return f"{self.ratio:.3g}x [no interval] — {self.verdict} (n={self.n}){note}"
        cover = "" if self.coverage >= 0.95 - 1e-9 else f", {self.coverage:.0%} interval"
        loud = ", a run noisy" if self.noisy else ""
        return (
            f"{self.ratio:.3g}x [{self.ci_low:.3g}, {self.ci_high:.3g}] {self.verdict} "
            f"(n={self.n}{cover}{loud}){note}"
        )


# ``tables/comparisons.csv``'s columns: a comparison's fields but how it is shown
COLUMNS = tuple(f.name for f in fields(Comparison) if f.name not in ("coverage", "noisy"))


def in_run(run: Run) -> list[Comparison]:
    """The before/after comparisons ``run``'s callbacks logged, per step and batch size."""
    m, tags = run.data.metrics, run.data.tags
    found = []
    pairs = sorted(
        {(g["step"], int(g["n"])) for name in m if (g := _IN_RUN.match(name)) is not None}
    )
    for step, batch in pairs:
        before = m.get(latency(side(step, BEFORE), batch))
        after = m.get(latency(side(step, AFTER), batch))
        ratio = m.get(speedup(step, batch))
        if ratio is None:
            if before is None or not after:
                continue
            ratio = before / after
        low = m.get(speedup(step, batch, "_ci_low"))
        high = m.get(speedup(step, batch, "_ci_high"))
        count = m.get(speedup(step, batch, "_rounds", COUNT))
        n = int(count) if count is not None and low is not None and high is not None else 1
        tag = tags.get(verdict_tag(step, batch))
        if n < 2:
            said, low, high = WITHIN_NOISE, None, None
        elif tag in VERDICTS:
            said = tag
        else:
            said = verdict(Interval(ratio, low, high, n, 0.95))  # type: ignore[arg-type]
        found.append(
            Comparison(
                run.info.run_id,
                f"{step}: before vs after",
                f"latency_b{batch}_ms",
                before,
                after,
                ratio,
                low,
                high,
                n,
                said,
                noisy=noisy(run),
            )
        )
    return found
