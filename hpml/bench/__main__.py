"""``python -m hpml.bench``: run benchmark cases, print their ratios, write ``.bench/results``.

Cases are imported only when they run, so ``--help`` and a bad ``--case`` answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hpml.bench.harness import (
    CaseResult,
    Measurement,
    Ratio,
    RatioSummary,
    Report,
    Settings,
    fmt,
    rounds_for_95,
    write_json,
)
from hpml.console import quiet_upstream

Case = Callable[[Settings, Path, Report], CaseResult]
BENCH_DIR = Path(".bench")  # git-ignored: results and the bench's own MLflow store


def lazy(module: str, function: str = "run") -> Case:
    """``module.function``, imported on first call (cases pull in torch and Lightning)."""

    def case(settings: Settings, bench_dir: Path, report: Report) -> CaseResult:
        return getattr(importlib.import_module(module), function)(settings, bench_dir, report)

    return case


CASES: dict[str, Case] = {
    "overhead": lazy("hpml.bench.overhead"),
    "placement": lazy("hpml.bench.placement"),
    "profiler_idle": lazy("hpml.bench.analysis", "run_profiler_idle"),
    "analysis_callbacks": lazy("hpml.bench.analysis", "run_analysis_callbacks"),
    "prune": lazy("hpml.bench.prune"),
    "quant": lazy("hpml.bench.quant"),
    "train_speed": lazy("hpml.bench.train_speed"),
    "parallel_sweep": lazy("hpml.bench.parallel_sweep"),
    "activations": lazy("hpml.bench.activations"),
    "fuse": lazy("hpml.bench.fuse"),
    "side_by_side": lazy("hpml.bench.side_by_side"),
    "startup": lazy("hpml.bench.startup"),
    "canary": lazy("hpml.bench.canary"),
}


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``low``."""

    def count(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return count


def parse_args(argv: Sequence[str], cases: Mapping[str, Case] = CASES) -> argparse.Namespace:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="python -m hpml.bench",
        description="Benchmark ratios, the variants of each case interleaved in one process.",
    )
    parser.add_argument(
        "--case",
        action="append",
        metavar="NAME",
        help=f"case to run, repeatable (default: all of {', '.join(cases)})",
    )
    for flag, low, default, text in (
        ("--rounds", 1, defaults.rounds, "rounds; each runs every variant once"),
        ("--steps", 1, defaults.steps, "timed steps per variant and round"),
        ("--warmup", 0, defaults.warmup, "untimed steps before them"),
        ("--threads", 1, defaults.threads, "torch intra-op threads for every variant"),
    ):
        kind = at_least(low)
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default %(default)s)")
    return parser.parse_args(argv)


def select_cases(names: Sequence[str] | None, cases: Mapping[str, Case]) -> list[str]:
    """The cases asked for, in order and once each; all when none was."""
    if not names:
        return list(cases)
    for name in names:
        if name not in cases:
            raise ValueError(f"unknown case '{name}' (valid: {', '.join(cases)})")
    return list(dict.fromkeys(names))


def _goal(r: Ratio) -> str:
    return "-" if r.goal is None else f"{'<=' if r.at_most else '>='} {r.goal:g}"


# the table's columns: (heading, a ratio's cell from its case's result and its summary)
COLUMNS: tuple[tuple[str, Callable[[CaseResult, RatioSummary], str]], ...] = (
    ("case", lambda result, s: result.case),
    ("metric", lambda result, s: s.ratio.metric),
    ("ratio", lambda result, s: f"{s.ratio.numerator} / {s.ratio.denominator}"),
    ("min", lambda result, s: fmt(s.min)),
    ("median", lambda result, s: fmt(s.median)),
    ("max", lambda result, s: fmt(s.max)),
    ("median [interval] verdict", lambda result, s: s.describe()),
    ("goal", lambda result, s: _goal(s.ratio)),
    ("meets", lambda result, s: {None: "-", True: "yes", False: "NO"}[s.meets_goal]),
    ("numerator median", lambda result, s: f"{fmt(s.numerator_median)} {s.ratio.unit}"),
    ("denominator median", lambda result, s: f"{fmt(s.denominator_median)} {s.ratio.unit}"),
    ("rounds", lambda result, s: str(result.settings.rounds)),
    ("threads", lambda result, s: str(result.settings.threads)),
)


def table(results: Sequence[CaseResult]) -> str:
    """One row per ratio (:data:`COLUMNS`), then a line per case: how it ran, under what load."""
    rows = [[heading for heading, _ in COLUMNS]]
    rows += [
        [cell(result, s) for _, cell in COLUMNS] for result in results for s in result.summaries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    for result in results:
        before = " ".join(f"{x:.2f}" for x in result.load_before)
        after = " ".join(f"{x:.2f}" for x in result.load_after)
        s = result.settings
        lines.append(
            f"{result.case}: {s.rounds} rounds x ({s.warmup} warm-up + {s.steps} timed "
            f"steps) per variant in {result.seconds:.0f} s; load average 1/5/15 min "
            f"{before} before, {after} after{short_of_95(result)}"
        )
    return "\n".join(lines)


def short_of_95(result: CaseResult) -> str:
    """``; intervals [min, max] of 5 rounds: 94%, not 95% (--rounds 6 or more)``, or nothing."""
    if not result.summaries:
        return ""
    interval = result.summaries[0].interval
    needed = rounds_for_95()
    if interval.n >= needed:
        return ""
    if interval.n < 2:
        return f"; one round gives no interval (--rounds {needed} or more for 95%)"
    return (
        f"; intervals [min, max] of {interval.n} rounds: {interval.coverage:.0%}, not 95% "
        f"(--rounds {needed} or more)"
    )


def progress(case: str, rounds: int) -> Report:
    """A line per variant and round on stderr: a bench takes minutes, and drift shows here."""

    def report(index: int, name: str, measurement: Measurement) -> None:
        values = ", ".join(f"{key} {fmt(value)}" for key, value in measurement.items())
        print(f"{case} round {index + 1}/{rounds}: {name}: {values}", file=sys.stderr, flush=True)

    return report


def main(
    argv: Sequence[str] | None = None,
    cases: Mapping[str, Case] = CASES,
    bench_dir: Path = BENCH_DIR,
) -> list[CaseResult]:
    """Run the selected cases in turn; print where the JSON went, and the table."""
    args = parse_args(sys.argv[1:] if argv is None else argv, cases)
    try:
        names = select_cases(args.case, cases)
    except ValueError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    settings = Settings(args.rounds, args.steps, args.warmup, args.threads)
    quiet_upstream()  # the known upstream notes, as a run drops them (hpml.console)
    results = []
    for name in names:
        result = cases[name](settings, bench_dir, progress(name, settings.rounds))
        results.append(result)
        print(f"hpml: bench {name} -> {write_json(result, bench_dir / 'results')}", file=sys.stderr)
    print(table(results))
    return results


if __name__ == "__main__":
    main()
