"""Pruning amounts as users read them: fractions in [0, 1), counts rounded to the nearest unit
(400 at 0.8 removes 320 and keeps 80, where ``int(400 * (1 - 0.8))`` is 79), and kept widths
rounded down to a multiple that kernels tile well (``round_to``, as torch-pruning's).
"""

from __future__ import annotations

from typing import Any

from hpml.errors import ConfigError


def check_amount(value: Any, key: str = "amount") -> float:
    """``value`` as a float in [0, 1), else a ConfigError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ConfigError(key, value, "a fraction in [0, 1) (the share of weights to remove)")
    return float(value)


def units_to_remove(total: int, amount: float) -> int:
    """Units (weights, channels, hidden units) that ``amount`` removes from ``total``."""
    return min(total, max(0, round(total * amount)))


def units_to_keep(total: int, amount: float, minimum: int = 1, round_to: int = 1) -> int:
    """Units left of ``total`` after removing ``amount``, never fewer than ``minimum`` (or all).

    With ``round_to`` > 1 a width that loses units is rounded down to a multiple of it, as
    torch-pruning's ``round_to`` rounds the channels it keeps (GPU kernels work in tiles of 8 or
    16 channels), but never below ``round_to`` nor ``minimum`` (rounded up to a multiple) and
    never above ``total``: a layer no wider than ``round_to`` keeps every unit.
    """
    keep = max(min(minimum, total), total - units_to_remove(total, amount))
    if round_to == 1 or keep == total:
        return keep
    floor = -(-max(minimum, round_to) // round_to) * round_to  # the least multiple allowed
    return min(total, max(floor, keep - keep % round_to))
