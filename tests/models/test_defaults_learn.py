"""Each model family's default visibly learns, short of perfect: val/loss falls from its first
epoch to its last, and VGG11's (``make train``) ends epoch 2 between 0.6 and 0.95 val/acc.

Each family runs its own composed config (optimiser, learning rate, epochs, data knobs) through
hpml.train in-process into a real MLflow store, the history read back from it. To stay cheap,
the train split and the batch are a quarter of the default's (half for VGG11): the same steps
per epoch in less time; the validation split stays as configured, so accuracy is measured on as
many samples as the default's. AlexNet runs its default as it is: at smaller batches its first
32 steps leave val/loss flat, where 32 steps of 64 images lower it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import options

FAMILIES = ["vgg11", "resnet18", "alexnet", "lstm", "vae"]
# train samples and batch size divided by this: the same steps per epoch; VGG11 by 2 only, its
# accuracy at a quarter (0.62) too near the bar, AlexNet not at all (see above)
SHRINK = {"vgg11": 2, "alexnet": 1}
QUIET = [
    "test=false",
    "trainer.enable_progress_bar=false",
    "trainer.enable_checkpointing=false",
    "callbacks.perf.warmup_steps=1",
    "logger.system_metrics_interval_s=0.5",
]


def history(client: Any, key: str) -> list[float]:
    """``key``'s values of the store's one run, epoch by epoch."""
    (run,) = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    points = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
    return [point.value for point in points]


def test_every_family_in_conf_is_covered():
    """A family added to conf/model/ is one of these or a depth or layout of VGG."""
    assert set(FAMILIES) <= set(options("model"))
    assert {o for o in options("model") if not o.startswith("vgg")} <= set(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_default_lowers_val_loss(family: str, composed, client) -> None:
    from hpml.train import train

    chosen = [f"model={family}", *QUIET]
    data = composed(chosen).data
    shrink = SHRINK.get(family, 4)
    shrunk = [
        f"data.train_samples={data.train_samples // shrink}",
        f"data.batch_size={data.batch_size // shrink}",
    ]
    train(composed([*chosen, *shrunk]))
    losses = history(client, "val/loss")
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    if family == "vgg11":
        accuracy = history(client, "val/acc")
        assert 0.6 <= accuracy[1] <= 0.95, accuracy
