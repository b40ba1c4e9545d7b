"""MFU against the peak measured in the dtype the run's precision computes in, on the CPU: a run
measures (or reads) only its own dtype's record, logs that record's figure as MFU's denominator
and names the dtype in a tag; MFU is 100 x achieved over that logged peak."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch

from hpml.analysis.devices import PRECISIONS, precision_dtype
from hpml.analysis.measured_peak import measure_compute, taken_in
from hpml.names import MFU_PEAK_DTYPE_TAG, mfu_peak
from hpml.train import train
from tests.conftest import QUICK

STAGES = ("train", "val", "test")


@pytest.mark.parametrize(("precision", "dtype"), [("32-true", "fp32"), ("bf16-mixed", "bf16")])
def test_a_runs_measured_peak_is_taken_in_its_precisions_dtype(
    composed, client, monkeypatch, tmp_path, precision, dtype
):
    cache = tmp_path / "peaks"
    monkeypatch.setenv("HPML_PEAK_CACHE", str(cache))
    cpu = torch.device("cpu")
    measure_compute(cpu, cache, dtype, seconds=0.05)  # a small budget, which the run reads back
    train(composed(["model=vae", "trainer=cpu", *QUICK, f"trainer.precision={precision}"]))
    (run,) = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert run.data.params["trainer.precision"] == precision
    # the run's own dtype, and only it: no record of another dtype was measured
    (record,) = [json.loads(path.read_text()) for path in cache.glob("*.json")]
    assert record["dtype"] == dtype
    assert run.data.tags[MFU_PEAK_DTYPE_TAG] == record["taken_in"] == taken_in(dtype, cpu)
    m = run.data.metrics
    peak = m[mfu_peak("measured")]
    assert peak == pytest.approx(record["flops_per_s"], rel=1e-9)
    for stage in STAGES:
        achieved = m[f"{stage}/achieved_flops_per_s"]
        assert achieved > 0, stage
        # medians over cycles of FLOP/s and of FLOP/s over the peak: equal up to float32
        assert m[f"{stage}/mfu_measured_pct"] == pytest.approx(100 * achieved / peak, rel=1e-5)


@pytest.mark.parametrize("precision", [*PRECISIONS, "64-true", "transformer-engine"])
def test_each_lightning_precision_is_held_to_the_peak_of_the_dtype_it_computes_in(precision):
    expected = {"32": "fp32", "64": "fp32", "16": "fp16", "bf": "bf16"}.get(precision[:2])
    assert precision_dtype(precision) == expected
    if precision.startswith("transformer"):
        return  # needs transformer_engine installed: no trainer to ask
    # what a CPU trainer reports: Lightning runs 16-mixed there as bf16-mixed, measured as such
    trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False)
    reported = precision_dtype(trainer.precision)
    assert reported == ("bf16" if precision in ("16", "16-mixed") else expected)
