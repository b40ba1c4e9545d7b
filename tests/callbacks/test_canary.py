"""The canary in real runs: timed once as the run's first stage starts and once as its last one
ends (fit and test, fit alone, test alone), its cost counted in the GEMMs and copies torch ran;
and the acceptance case: identical runs in a row, a CPU burner started half-way, and the report
flags the runs beside the burner ``slow machine``, and none before it."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest

from hpml.analysis.canary import MIB, Reading
from hpml.callbacks.canary import Canary
from hpml.names import (
    CANARY_PLAN_TAG,
    CANARY_POINTS,
    CANARY_THRESHOLD_TAG,
    FLOPS_PER_S,
    MS,
    canary,
)
from tests.analysis.test_canary_workload import Counted
from tests.helpers import spinning

START, END = CANARY_POINTS

TINY = [
    "model=vae",
    "trainer.max_epochs=1",
    "data.limit=32",
    "data.batch_size=32",
    "trainer.enable_progress_bar=false",
    "callbacks=canary",
    "++trainer.limit_val_batches=0",
    "trainer.enable_checkpointing=false",
    "logger.log_system_metrics=false",
]
GEMM_N, COPY_MIB = 96, 1  # shapes no VAE step computes: each GEMM and copy counted is the canary's


def trained(root: Path, overrides: list[str], name: str) -> Any:
    """Train ``overrides`` in this process, in its own folder; its MLflow run."""
    from mlflow import MlflowClient

    from hpml.train import compose_job, train

    train(compose_job(overrides, root / "outputs" / name))
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    experiment = client.get_experiment_by_name("hpml").experiment_id
    return client.search_runs([experiment], order_by=["attributes.start_time DESC"])[0]


@pytest.mark.parametrize(
    "stages",
    [["test=true"], ["test=false"], ["fit=false", "test=true"]],
    ids=["fit and test", "fit", "test"],
)
def test_a_run_times_its_canary_once_at_its_start_and_once_at_its_end(
    root: Path, stages: list[str]
) -> None:
    sizes = [f"callbacks.canary.gemm_n={GEMM_N}", f"callbacks.canary.copy_mib={COPY_MIB}"]
    sizes.append("callbacks.canary.budget_s=null")  # every repeat, however loaded the machine
    with Counted() as counted:
        run = trained(root, [*TINY, *sizes, "callbacks.canary.repeats=2", *stages], "run")
    calls = 2 * (1 + 2)  # start and end, each a warm-up and 2 repeats
    assert counted.calls[("mm", (GEMM_N, GEMM_N), "cpu")] == calls
    assert counted.calls[("copy_", (COPY_MIB * MIB // 4,), "cpu")] == calls
    metrics = run.data.metrics
    for when in (START, END):
        ms = metrics[canary("cpu_gemm", when, MS)]
        flops = metrics[canary("cpu_gemm", when, FLOPS_PER_S)]
        assert flops * ms / 1e3 == pytest.approx(2 * GEMM_N**3)
    assert run.data.tags[CANARY_PLAN_TAG] == (
        f"cpu_gemm n={GEMM_N} float32, cpu_copy {COPY_MIB} MiB; best of 2 after 1 warm-up"
    )
    assert run.data.tags[CANARY_THRESHOLD_TAG] == "0.25"


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """This thread on ``cpu`` alone, its CPUs given back on leaving."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class PinnedCanary(Canary):
    """hpml's canary, its thread on CPU ``cpu`` alone while it times its workload, in every
    run alike: burners spinning on that CPU slow each canary beside them, and the rest of the
    run keeps the other CPU (the test costs seconds, not minutes)."""

    def __init__(self, cpu: int, **knobs: Any) -> None:
        super().__init__(**knobs)
        self.cpu = cpu

    def _measure(self, trainer: L.Trainer) -> Reading:
        with pinned(self.cpu):
            return super()._measure(trainer)


BURNERS = 5


@pytest.mark.usefixtures("alone")
def test_a_burner_started_half_way_flags_the_runs_beside_it_and_none_before(root: Path) -> None:
    """Four identical runs (repeats) with one torch thread, each canary on one CPU; after the
    second run, five processes start spinning on that CPU. Each run's canary is judged against
    the median of the other three, as the report reads the store.

    Why noise from others cannot flip it: a canary beside the burners gets at most 1/6 of its
    CPU where one before them got up to all of it, while others' threads on that CPU count
    alike in both: with ``o`` of them, a repeat takes (6 + o) / (1 + o) times as long, 2x at
    o = 4 (a load average of about 10 on 2 cores), against the 1.25x flagged. A run beside
    the burners is compared with a median that holds the slower of the two runs before them,
    one before them with the faster of the two beside them. Each repeat (a GEMM of 768 and a
    copy of 32 MiB, on one thread) lasts several scheduler slices, so no best repeat slips
    between two of the burners' slices.
    """
    from mlflow import MlflowClient

    from hpml.report.machine import slowdowns
    from hpml.report.stores import Stores

    cpu = max(os.sched_getaffinity(0))
    knobs = [
        *TINY,
        "test=false",
        "threads=1",
        f"callbacks.canary._target_={__name__}.PinnedCanary",
        f"+callbacks.canary.cpu={cpu}",
        "callbacks.canary.gemm_n=768",  # repeats of several scheduler slices each
        "callbacks.canary.copy_mib=32",
    ]
    ids, burners = [], []
    try:
        for replicate in range(4):
            if replicate == 2:
                burners = [spinning(cpu) for _ in range(BURNERS)]
            run = trained(root, [*knobs, f"replicate={replicate}"], f"job{replicate}")
            ids.append(run.info.run_id)
    finally:
        for burner in burners:
            os.kill(burner.pid, signal.SIGKILL)
            burner.wait()
    stores = Stores([MlflowClient(f"sqlite:///{root}/mlflow.db")])
    found = slowdowns(stores, [stores.run(run_id) for run_id in ids])
    seen = {i: (found[i].workload, round(found[i].ratio, 2)) for i in ids}
    assert [found[i].slow for i in ids] == [False, False, True, True], seen
