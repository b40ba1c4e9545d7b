"""Side-by-side rounds: the variants of a case interleaved in one process, ratios paired per round.

Load on a shared machine swings wall-clock within minutes, so each round runs every variant
once in rotating order (:func:`hpml.analysis.rounds.round_order`) and a ratio is taken within a
round, then summarised as hpml's in-run comparisons are (:mod:`hpml.analysis.stats`). Pure
Python: the arithmetic is tested without measuring anything.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpml.analysis.rounds import round_order

if TYPE_CHECKING:  # scipy's import takes a second: `--help` and a bad --case answer without it
    from hpml.analysis.stats import Interval

Measurement = dict[str, float]
Variant = Callable[[], Measurement]
Report = Callable[[int, str, Measurement], None]
CONFIDENCE = 0.95 - 1e-9  # an interval's coverage that counts as 95% (binomial sums round)
ABOVE, BELOW = "above 1", "below 1"  # the verdicts of a ratio that is not a speed-up


@dataclass(frozen=True)
class Settings:
    """How much to run: the same for every variant of a case, so their windows are alike."""

    rounds: int = 5
    steps: int = 8
    warmup: int = 2
    threads: int = 1


@dataclass(frozen=True)
class Round:
    """What each variant measured in one round, and the order they ran in."""

    order: tuple[str, ...]
    measurements: dict[str, Measurement]


def interleave(
    variants: Mapping[str, Variant], rounds: int, report: Report | None = None, group: int = 1
) -> list[Round]:
    """Run every variant once per round in rotating order (:func:`round_order`, ``group``)."""
    if not variants:
        raise ValueError("interleave needs at least one variant")
    names = list(variants)
    done: list[Round] = []
    for index in range(rounds):
        order = round_order(names, index, group)
        measurements: dict[str, Measurement] = {}
        for name in order:
            measurements[name] = variants[name]()
            if report is not None:
                report(index, name, measurements[name])
        done.append(Round(tuple(order), measurements))
    return done


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of measurement ``key``; the median's goal is at least
    ``goal``, or at most where ``at_most``. ``speedup``: before / after of a time, whose verdict
    reads ``faster`` or ``slower``; any other ratio reads ``above 1`` or ``below 1``."""

    metric: str
    key: str
    unit: str
    numerator: str
    denominator: str
    goal: float | None = None
    at_most: bool = False
    speedup: bool = False


@dataclass(frozen=True)
class RatioSummary:
    """One ratio per round (both sides saw the same stretch of load) and their spread."""

    ratio: Ratio
    values: tuple[float, ...]
    numerator_median: float
    denominator_median: float

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def meets_goal(self) -> bool | None:
        if self.ratio.goal is None:
            return None
        if self.ratio.at_most:
            return self.median <= self.ratio.goal
        return self.median >= self.ratio.goal

    @property
    def interval(self) -> Interval:
        """The median of the per-round ratios and its order-statistic interval (95%, or
        [min, max] with fewer than :func:`rounds_for_95` rounds)."""
        from hpml.analysis.stats import median_ci

        return median_ci(self.values)

    @property
    def verdict(self) -> str:
        from hpml.analysis.stats import FASTER, WITHIN_NOISE, verdict

        said = verdict(self.interval)
        if said == WITHIN_NOISE or self.ratio.speedup:
            return said
        return ABOVE if said == FASTER else BELOW

    def describe(self) -> str:
        """``2.910x [2.700, 3.100] faster (n=9)``, as a report's comparison cell: ``, 94%
        interval`` where too few rounds leave it short of 95%, ``[no interval]`` for one."""
        i = self.interval
        if i.n < 2:
            return f"{fmt(i.median)}x [no interval] {self.verdict} (n={i.n})"
        cover = "" if i.coverage >= CONFIDENCE else f", {i.coverage:.0%} interval"
        return f"{fmt(i.median)}x [{fmt(i.low)}, {fmt(i.high)}] {self.verdict} (n={i.n}{cover})"

    def to_dict(self) -> dict[str, Any]:
        i = self.interval
        return {
            **asdict(self.ratio),
            "values": list(self.values),
            "min": self.min,
            "median": self.median,
            "max": self.max,
            "ci_low": i.low,
            "ci_high": i.high,
            "ci_coverage": i.coverage,
            "verdict": self.verdict,
            "meets_goal": self.meets_goal,
            "numerator_median": self.numerator_median,
            "denominator_median": self.denominator_median,
        }


def rounds_for_95() -> int:
    """The fewest rounds whose interval of the median reaches 95% (6: [min, max] covers 97%)."""
    from hpml.analysis.stats import median_ci

    n = 2
    while median_ci([float(v) for v in range(n)]).coverage < CONFIDENCE:
        n += 1
    return n


def fmt(value: float) -> str:
    """Three significant decimals for ratios near 1, fewer digits for large throughputs."""
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def summarize(ratio: Ratio, rounds: Sequence[Round]) -> RatioSummary:
    if not rounds:
        raise ValueError("summarize needs at least one round")
    tops = [r.measurements[ratio.numerator][ratio.key] for r in rounds]
    bottoms = [r.measurements[ratio.denominator][ratio.key] for r in rounds]
    return RatioSummary(
        ratio,
        tuple(t / b for t, b in zip(tops, bottoms, strict=True)),
        statistics.median(tops),
        statistics.median(bottoms),
    )


@dataclass(frozen=True)
class CaseResult:
    """Everything a case measured, with the settings and load it was measured under."""

    case: str
    settings: Settings
    rounds: list[Round]
    summaries: list[RatioSummary]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    seconds: float
    notes: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "settings": asdict(self.settings),
            "ratios": [s.to_dict() for s in self.summaries],
            "rounds": [asdict(r) for r in self.rounds],
            "load_avg_before_1m_5m_15m": list(self.load_before),
            "load_avg_after_1m_5m_15m": list(self.load_after),
            "seconds": self.seconds,
            "notes": self.notes,
        }


def run_case(
    case: str,
    variants: Mapping[str, Variant],
    ratios: Sequence[Ratio],
    settings: Settings,
    report: Report | None = None,
    notes: Mapping[str, Any] | None = None,
    group: int = 1,
) -> CaseResult:
    """Interleave ``variants`` for ``settings.rounds`` rounds and summarise ``ratios``, with
    the machine's load averages before and after.

    Args:
        variants: name -> a call that measures the variant once.
        report: told each measurement as it is taken (progress), if given.
        notes: what else the JSON records (device, versions, sizes).
        group: variants run back to back as a group (:func:`round_order`).
    """
    load_before, start = os.getloadavg(), time.perf_counter()
    rounds = interleave(variants, settings.rounds, report, group)
    seconds, load_after = time.perf_counter() - start, os.getloadavg()
    return CaseResult(
        case,
        settings,
        rounds,
        [summarize(r, rounds) for r in ratios],
        load_before,
        load_after,
        seconds,
        dict(notes or {}),
    )


def write_json(result: CaseResult, folder: Path) -> Path:
    """``folder/<case>.json``; the folder is created if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.case}.json"
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return path
