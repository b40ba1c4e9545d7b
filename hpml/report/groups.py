"""Repeats of one config as one group, and every comparison the report draws with its verdict.

A *group* is the runs whose params differ only in ``replicate`` (and the seeds, unless
``by_seed``) and per-job bookkeeping, and that ran in one environment
(:mod:`hpml.report.environment`). Besides a run's own before/after
(:mod:`hpml.report.comparisons`), every other group is compared *against the baseline*: the
first group that prunes, quantises and compiles nothing (else the first finished one), where
the baseline was repeated. A comparison across runs with a noisy side (tag ``hpml.noisy``) is
``within noise``: its sides were timed at other moments.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from hpml.analysis.stats import FASTER, SLOWER, WITHIN_NOISE, Interval, median_ci, ratio_ci, verdict
from hpml.names import CHOICE_TAG, HOST, INPUT, OUTPUT_DIR_TAG, SWEEP_DIR_TAG, bound_tag, choice_tag
from hpml.report.comparisons import Comparison, in_run, noisy
from hpml.report.environment import SHOWN, entries
from hpml.report.table import BOOKKEEPING, differing_keys, short_name, value

if TYPE_CHECKING:
    from mlflow.entities import Run

STEPS = ("prune", "quant", "compile")  # steps whose callbacks time before and after
FINISHED = "FINISHED"
# speed measures a group is compared on against the baseline: higher is faster for throughput,
# lower for latency (a side's median over rounds) and the median step time
HIGHER_IS_FASTER = re.compile(r"^[^/]+/throughput(_per_device)?_samples_per_s$")
LOWER_IS_FASTER = re.compile(r"^[^/]+/(latency_b\d+|step_time_p50)_ms$")
# a run's own speed, loader and host included: gated by what bounds its stage (before/after
# latencies time fixed batches with no loader, so they are not)
RUN_SPEED = re.compile(
    r"^(?P<stage>[^/]+)/(throughput(_per_device)?_samples_per_s|step_time_p50_ms)$"
)
GATES = {INPUT: "input-bound", HOST: "host-bound"}  # a bound both sides share -> the verdict


def ignored(key: str, by_seed: bool = False) -> bool:
    """Whether param ``key`` is left out of a run's identity: a repeat's number, its seeds
    (unless ``by_seed``), per-job bookkeeping, or the host and store it ran on and came from."""
    if key == "replicate" or key in SHOWN or (not by_seed and key in ("seed", "data.seed")):
        return True
    return key.startswith(BOOKKEEPING) or "dirpath" in key or key.endswith("_dir")


def params_but(run: Run, skip: Callable[[str], bool]) -> frozenset[tuple[str, str]]:
    """``run``'s params but those ``skip`` names, its own job and sweep folders replaced by
    placeholders (so two jobs' checkpoint paths compare equal)."""
    folders = [
        (run.data.tags.get(OUTPUT_DIR_TAG), "<job>"),
        (run.data.tags.get(SWEEP_DIR_TAG), "<sweep>"),
    ]
    found = set()
    for key, text in run.data.params.items():
        if skip(key):
            continue
        for folder, placeholder in folders:
            if folder:
                text = text.replace(folder, placeholder)
        found.add((key, text))
    return frozenset(found)


def identity(run: Run, by_seed: bool = False) -> frozenset[tuple[str, str]]:
    """What a run's repeats share: its config groups' options, its params but the
    :func:`ignored`, and where it ran (:func:`hpml.report.environment.entries`)."""
    choices = {(k, v) for k, v in run.data.tags.items() if k.startswith(CHOICE_TAG)}
    return params_but(run, lambda key: ignored(key, by_seed)) | choices | entries(run)


@dataclass(frozen=True)
class Group:
    """The repeats of one config: ``label`` names it by the keys that differ between groups."""

    label: str
    runs: tuple[Run, ...]

    @property
    def ids(self) -> str:
        return " ".join(r.info.run_id for r in self.runs)

    @property
    def names(self) -> str:
        return ", ".join(short_name(r) for r in self.runs)

    @property
    def finished(self) -> bool:
        return self.runs[0].info.status == FINISHED

    @property
    def noisy(self) -> bool:
        return any(noisy(r) for r in self.runs)

    def values(self, name: str) -> list[float]:
        return [v for r in self.runs if math.isfinite(v := r.data.metrics.get(name, math.nan))]

    def interval(self, name: str) -> Interval | None:
        values = self.values(name)
        return median_ci(values) if values else None

    @cached_property
    def in_run(self) -> dict[tuple[str, int], list[Comparison]]:
        found: dict[tuple[str, int], list[Comparison]] = {}
        for run in self.runs:
            for c in in_run(run):
                found.setdefault((c.step, c.batch), []).append(c)
        return found

    def speedup(self, step: str, batch: int) -> Comparison | None:
        """Step ``step``'s before/after at ``batch``: a single run's own; for repeats, the
        median of their speed-ups, its interval over them and their verdict (:func:`_pooled`)."""
        found = self.in_run.get((step, batch))
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        ratios = median_ci([c.ratio for c in found])
        return Comparison(
            self.ids,
            found[0].comparison,
            found[0].measure,
            _median([c.before for c in found]),
            _median([c.after for c in found]),
            ratios.median,
            ratios.low,
            ratios.high,
            ratios.n,
            _pooled(found),
            ratios.coverage,
            self.noisy,
        )


def _pooled(found: list[Comparison]) -> str:
    """Repeats say ``faster`` (``slower``) only when each, timed side by side, said so: an
    interval over few repeats covers less than 95%, and repeats not timed side by side repeat
    their bias."""
    said = {c.verdict for c in found}
    if len(said) == 1 and all(c.timed_side_by_side for c in found):
        return said.pop()
    return WITHIN_NOISE


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median_ci(known).median if known else None


def group(runs: list[Run], by_seed: bool = False) -> list[Group]:
    """``runs`` as groups of repeats, in the order of each group's first run; runs that did not
    finish are never pooled with finished repeats (their metrics may be partial)."""
    keys = label_keys(runs, by_seed)
    found: dict[tuple[frozenset[tuple[str, str]], str], list[Run]] = {}
    for run in runs:
        found.setdefault((identity(run, by_seed), run.info.status), []).append(run)
    return [
        Group(_label(members[0], keys, status), tuple(members))
        for (_, status), members in found.items()
    ]


def _label(run: Run, keys: list[str], status: str) -> str:
    text = ", ".join(f"{k}={v}" for k in keys if (v := value(run, k))) or "all runs"
    return text if status == FINISHED else f"{text} ({status})"


def label_keys(runs: list[Run], by_seed: bool = False) -> list[str]:
    """The differing keys that tell groups apart."""
    return [k for k in differing_keys(runs) if not ignored(k, by_seed)]


def direction(name: str) -> int:
    """1 where a higher value of metric ``name`` is faster, -1 where lower is, 0: no speed."""
    if HIGHER_IS_FASTER.match(name):
        return 1
    return -1 if LOWER_IS_FASTER.match(name) else 0


def baseline(groups: list[Group]) -> Group | None:
    """The first finished group whose runs prune, quantise and compile nothing; else the first
    finished group; None when no run finished."""
    finished = [g for g in groups if g.finished]
    return ([g for g in finished if plain(g)] or finished or [None])[0]


def plain(group: Group) -> bool:
    """Whether a group's runs prune, quantise and compile nothing."""
    for run, step in itertools.product(group.runs, STEPS):
        option = run.data.tags.get(choice_tag(step))
        if option not in (None, "none"):
            return False
        if option is None and any(k.startswith(f"{step}.") for k in run.data.params):
            return False
    return True


def against_baseline(groups: list[Group], base: Group | None) -> list[Comparison]:
    """Every other finished group against ``base`` (:func:`versus`); none where the baseline
    ran once (without repeats no config can be told apart from it)."""
    if base is None or len(base.runs) < 2:
        return []
    return [
        c
        for other in groups
        if other is not base and other.finished
        for c in versus(
            other, base, f"{other.label} vs baseline {base.label}", feeds_input=feeds(other, base)
        )
    ]


def feeds(other: Group, base: Group) -> bool:
    """Whether ``other`` and ``base`` differ in what feeds their input (a ``data.*`` key)."""
    mine, theirs = (dict(params_but(g.runs[0], ignored)) for g in (other, base))
    return any(
        mine.get(k) != theirs.get(k) for k in mine.keys() | theirs.keys() if k.startswith("data.")
    )


def versus(
    other: Group, base: Group, comparison: str, margin: float = 0.0, feeds_input: bool = False
) -> list[Comparison]:
    """``other`` against ``base`` on each speed measure both carry: the ratio of their medians
    (> 1: ``other`` faster) with :func:`~hpml.analysis.stats.ratio_ci`'s interval over their
    runs; ``within noise`` when it reaches into ``1 +- margin``, a side ran once, or a run of
    either is noisy; ``input-bound`` (``host-bound``) on a run's own speed when every run of
    both sides was bound by its input (host) in that stage, so neither measured the model,
    unless the key compared is what feeds the input (``feeds_input``: a ``data.*`` key).
    ``comparison`` names the comparisons (``tables/comparisons.csv``).
    """
    found = []
    names = sorted(
        {n for r in other.runs for n in r.data.metrics if direction(n)}
        & {n for r in base.runs for n in r.data.metrics}
    )
    for name in names:
        mine, theirs = other.values(name), base.values(name)
        if not mine or not theirs:
            continue
        interval = ratio_ci(mine, theirs) if direction(name) > 0 else ratio_ci(theirs, mine)
        real = interval.n >= 2
        said = verdict(interval, noisy=other.noisy or base.noisy, margin=margin)
        bound = None if feeds_input else shared_bound(name, (*other.runs, *base.runs))
        found.append(
            Comparison(
                other.ids,
                comparison,
                name,
                median_ci(theirs).median,
                median_ci(mine).median,
                interval.median,
                interval.low if real else None,
                interval.high if real else None,
                interval.n,
                GATES.get(bound or "", said),
                interval.coverage,
                other.noisy or base.noisy,
            )
        )
    return found


def shared_bound(name: str, runs: tuple[Run, ...]) -> str | None:
    """The bound (``hpml.bound.<stage>``) every one of ``runs`` had in the stage of speed
    measure ``name``; None where they differ, one says none, or ``name`` is no run's own speed."""
    match = RUN_SPEED.match(name)
    if match is None:
        return None
    said = {run.data.tags.get(bound_tag(match["stage"])) for run in runs}
    return said.pop() if len(said) == 1 else None


def sign(said: str) -> int:
    """+1 faster, -1 slower, 0 within noise: a verdict as a comparison's outcome."""
    return {FASTER: 1, SLOWER: -1}.get(said, 0)
