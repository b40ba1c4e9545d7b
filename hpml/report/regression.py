"""A regression check for CI (``--fail-on slower``), as asv's ``continuous``: a config fails
where a speed measure is ``slower`` and even its interval's upper end keeps less than
``1 - threshold`` of the reference's speed; ``within noise`` never fails. A line says so where
the two sides' canaries differ (:func:`hpml.report.machine.sides_differ`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpml.analysis.stats import SLOWER
from hpml.names import label

if TYPE_CHECKING:
    from hpml.report.pairs import Pair


def slower(pairs: list[Pair], threshold: float) -> list[str]:
    """One line per config that regressed: the config, then each of its measures that did,
    as ``ratio [interval] verdict (n)``."""
    lines = []
    for pair in pairs:
        for other, found in pair.against.items():
            bad = [
                c
                for c in found
                if c.verdict == SLOWER and c.ci_high is not None and c.ci_high < 1 - threshold
            ]
            if bad:
                what = "; ".join(f"{label(c.measure)} {c.cell(with_note=False)}" for c in bad)
                notes = "".join(f"; {note}" for note in dict.fromkeys(c.note for c in bad) if note)
                lines.append(f"{pair.config} ({other} vs {pair.reference}): {what}{notes}")
    return lines
