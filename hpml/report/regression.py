"""A regression check for CI (``--fail-on slower``), as asv's ``continuous``: a config fails
where a speed measure is ``slower`` and even its interval's upper end keeps less than
``1 - threshold`` of the reference's speed; ``within noise`` never fails."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpml.analysis.stats import SLOWER
from hpml.names import label

if TYPE_CHECKING:
    from hpml.report.comparisons import Comparison
    from hpml.report.pairs import Pair

THRESHOLD = 0.05  # --threshold's default: slower by more than 5 % over the whole interval


def regressed(comparison: Comparison, threshold: float = THRESHOLD) -> bool:
    """Whether ``comparison`` is slower beyond ``threshold`` over its whole interval."""
    high = comparison.ci_high
    return comparison.verdict == SLOWER and high is not None and high < 1 - threshold


def slower(pairs: list[Pair], threshold: float = THRESHOLD) -> list[str]:
    """One line per config that regressed: the config, then each of its measures that did,
    as ``ratio [interval] verdict (n)``."""
    lines = []
    for pair in pairs:
        for other, found in pair.against.items():
            bad = [c for c in found if regressed(c, threshold)]
            if bad:
                what = "; ".join(f"{label(c.measure)} {c.cell()}" for c in bad)
                lines.append(f"{pair.config} ({other} vs {pair.reference}): {what}")
    return lines
