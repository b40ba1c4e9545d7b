"""The activations group: a run's measured saved bytes shrink, its names are checked first."""

from __future__ import annotations

import pytest

from hpml.errors import HpmlError

TINY = [
    "trainer.max_epochs=1",
    "data.train_samples=16",
    "data.val_samples=8",
    "data.test_samples=8",
    "data.batch_size=8",
    "test=false",
    "trainer.enable_progress_bar=false",
    "trainer.enable_checkpointing=false",
    "callbacks.perf.warmup_steps=0",
    "callbacks.perf.count_flops=false",
    "callbacks.perf.measured_peak=false",
    "callbacks.model_stats=null",
    "logger.system_metrics_interval_s=0.5",
]


@pytest.mark.slow  # three short runs: ~15 s on an idle machine, 40 s under load
def test_checkpoint_and_bf16_shrink_the_measured_activations_of_the_same_model(composed, client):
    from hpml.train import train

    saved, tags = {}, {}
    for option in ("keep", "checkpoint", "bf16"):
        metrics = train(composed([f"activations={option}", *TINY]))
        assert metrics["train/loss"] > 0
        experiment = client.get_experiment_by_name("hpml").experiment_id
        run = client.search_runs([experiment], order_by=["attributes.start_time DESC"])[0]
        saved[option] = run.data.metrics["memory/activations_bytes"]
        tags[option] = run.data.tags
        assert "train/step_time_p50_ms" in run.data.metrics
    assert 0 < saved["checkpoint"] < saved["keep"]
    assert 0 < saved["bf16"] < saved["keep"]
    assert "hpml.activations.method" not in tags["keep"]
    assert tags["checkpoint"]["hpml.activations.modules"].startswith("net.features[0:4],")
    assert tags["bf16"]["hpml.activations.method"] == "bf16"


def test_an_unknown_module_is_refused_before_training(composed):
    from hpml.train import job_parts

    cfg = composed(["activations=checkpoint", "activations.modules=[net.featurs]"])
    with pytest.raises(HpmlError, match=r"^activations\.modules='net\.featurs' is invalid: .*"):
        job_parts(cfg, None)


def test_modules_are_for_checkpoint_only(composed):
    from hpml.build import build

    cfg = composed(["activations=bf16", "+activations.modules=[net.features]"])
    with pytest.raises(HpmlError, match=r"activations\.modules=.* only method=checkpoint"):
        build("activations", cfg.activations)
