"""The report's sentence on the order a sweep's runs ran in (``hpml.report.order``), on runs
shaped as hpml logs them: params, the sweep's parent and the job's number (``hpml.job_num``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpml.report.order import (
    BACK_TO_BACK,
    INTERLEAVED,
    IRREGULAR,
    ONE_CONFIG,
    UNREPEATED,
    arrangement,
    run_order,
)


def run(num: int, lr: str, replicate: int, parent: str = "sweep") -> SimpleNamespace:
    params = {"model.optimizer.lr": lr, "replicate": str(replicate), "seed": str(replicate)}
    tags = {"hpml.job_num": str(num), "mlflow.parentRunId": parent}
    return SimpleNamespace(data=SimpleNamespace(params=params, tags=tags))


def sweep(order: list[tuple[str, int]], parent: str = "sweep") -> list[SimpleNamespace]:
    return [run(num, lr, rep, parent) for num, (lr, rep) in enumerate(order)]


INTERLEAVED_ORDER = [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
HYDRA_ORDER = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]


@pytest.mark.parametrize(
    ("order", "said"),
    [
        (INTERLEAVED_ORDER, INTERLEAVED),
        (HYDRA_ORDER, BACK_TO_BACK),  # Hydra's basic sweeper: the last key varies fastest
        ([("a", 0), ("a", 1), ("b", 0), ("a", 2), ("b", 1)], IRREGULAR),
        ([("a", 0), ("b", 0), ("c", 0)], UNREPEATED),
        ([("a", 0), ("a", 1)], ONE_CONFIG),
    ],
)
def test_the_arrangement_of_a_sweeps_repeats(order, said):
    assert arrangement(sweep(order)) == said


def test_the_order_is_read_from_job_numbers_sweep_by_sweep():
    runs = sweep(INTERLEAVED_ORDER)[::-1]  # as a store may list them: job numbers decide
    assert run_order(runs) == f"Runs in the order they ran (hpml.job_num): {INTERLEAVED}."
    runs += sweep(HYDRA_ORDER, "old") + sweep(HYDRA_ORDER, "older")
    assert run_order(runs) == (
        f"Runs in the order they ran (hpml.job_num), by sweep: in 1 sweep, {INTERLEAVED}; "
        f"in 2 sweeps, {BACK_TO_BACK}."
    )
    # --by-seed: seeds (here one per repeat) are part of a config, so nothing is repeated
    assert UNREPEATED in run_order(sweep(INTERLEAVED_ORDER), by_seed=True)
    single = run(0, "a", 0)
    del single.data.tags["mlflow.parentRunId"]  # a run outside a sweep: no order to state
    assert run_order([single]) is None
