"""Rotating round order: the variants of a side-by-side timing take turns going first.

Pure Python (no torch), shared by the in-run comparisons (:mod:`hpml.analysis.compare`) and the
bench (:mod:`hpml.bench.harness`).
"""

from __future__ import annotations

from collections.abc import Sequence


def round_order(names: Sequence[str], index: int, group: int = 1) -> list[str]:
    """Variants in round ``index``: each round starts one variant later (A B, B A, A B, ...).
    With ``group`` > 1, runs of ``group`` names (a ratio's sides) rotate together, and within.
    """
    sets = [list(names[start : start + group]) for start in range(0, len(names), group)]
    shift = index % len(sets)
    rotated = [*sets[shift:], *sets[:shift]]
    return [
        name for one in rotated for name in [*one[index % len(one) :], *one[: index % len(one)]]
    ]
