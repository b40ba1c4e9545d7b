"""Hydra's basic sweeper with a sweep's repeats interleaved.

Hydra's basic sweeper runs the product of the swept values with the last key varying fastest,
so ``model.optimizer.lr=1e-3,2e-3 replicate=0,1,2`` ran lr 1e-3 three times, then 2e-3 three
times: a drift in the machine's speed over minutes sat on one config. Here replicate 0 of every
config runs first, then replicate 1 of every config, and so on; the configs keep Hydra's order
within each round, and each job's overrides their order (its folder name, its run name). A
launcher runs jobs in the order it is given them, so ``hydra.job.num`` (the tag
``hpml.job_num``) is each job's place in that order.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.types import Override

REPEAT_KEY = "replicate"  # conf/train.yaml: a repeat's number, nothing else


def interleaved(jobs: Sequence[Sequence[str]], columns: Sequence[bool]) -> list[list[str]]:
    """``jobs`` (Hydra's product, one ``key=value`` per column) with the repeat rounds in turn:
    a job's round is how many jobs before it have the same overrides outside the ``columns``
    marked True (the repeat key's); a stable sort on it keeps every other order."""
    seen: dict[tuple[str, ...], int] = {}
    rounds = []
    for job in jobs:
        config = tuple(text for text, repeat in zip(job, columns, strict=True) if not repeat)
        rounds.append(seen.get(config, 0))
        seen[config] = rounds[-1] + 1
    order = sorted(range(len(jobs)), key=rounds.__getitem__)
    return [list(jobs[index]) for index in order]


class InterleavedSweeper(BasicSweeper):
    """:class:`BasicSweeper` whose jobs run a round of every config per repeat (``replicate``)."""

    @staticmethod
    def split_arguments(
        overrides: list[Override], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        jobs = BasicSweeper.split_arguments(overrides, None)[0]
        repeat: dict[str, bool] = {}  # a column per key, in the order Hydra's product has them
        for override in overrides:
            repeat.setdefault(override.get_key_element(), override.key_or_group == REPEAT_KEY)
        if any(repeat.values()):
            jobs = interleaved(jobs, list(repeat.values()))
        if max_batch_size is None:
            return [jobs]
        return list(BasicSweeper.split_overrides_to_chunks(jobs, max_batch_size))
