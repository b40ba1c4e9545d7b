"""The performance monitor follows the model it measures: pruned or quantised mid-run."""

from __future__ import annotations

import pytest

from hpml.train import train
from tests.conftest import QUICK


def only_run(client):
    return client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]


def test_achieved_flops_use_the_pruned_models_flops(composed, client):
    train(
        composed(
            [
                "model=vgg11",
                *QUICK,
                "prune=l1_structured",
                "prune.amount=0.5",
                "prune.schedule=before_fit",
                "prune.latency_budget_s=0",  # latency is not what this test checks
                "trainer.enable_checkpointing=false",  # nor are checkpoints
            ]
        )
    )
    run = only_run(client)
    m = run.data.metrics
    pruned = m["prune_after/fwd_flops_per_sample"]
    assert pruned < 0.5 * m["prune_before/fwd_flops_per_sample"]
    assert m["test/achieved_flops_per_s"] == pytest.approx(
        pruned * m["test/throughput_samples_per_s"], rel=1e-6
    )
    history = client.get_metric_history(run.info.run_id, "model/fwd_flops_per_sample")
    assert history[-1].value == pytest.approx(pruned)


def test_quantised_net_does_not_report_zero_parameters(composed, client):
    train(composed(["model=vae", *QUICK, "quant=dynamic_int8", "quant.latency_budget_s=0"]))
    m = only_run(client).data.metrics
    assert m["quant_after/size_bytes"] < m["quant_before/size_bytes"]
    assert m["model/params_count"] > 0
    assert "model_final/params_count" not in m  # packed int8 weights are no Parameters: no 0
    # the whole module's file ("net." key prefixes) against the bare net's: the int8 size
    assert m["model_final/size_bytes"] == pytest.approx(m["quant_after/size_bytes"], rel=0.01)
