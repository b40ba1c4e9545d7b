"""The one before/after measurement: quality as the model's validation_step, variants in place."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
from torch.nn import functional as F

from hpml.analysis.model_stats import state_dict_bytes
from hpml.callbacks.measure import Settings, measure, val_loader, validation_quality
from hpml.errors import ConfigError


@pytest.fixture
def validated(composed):
    """An untrained LSTM classifier, its synthetic data and a trainer that ran validate once."""
    from hpml.train import build

    cfg = composed(["model=lstm", "data.val_samples=70", "data.batch_size=32"])
    datamodule = build("data", cfg.data)
    module = build("model", cfg.model, data=datamodule.spec)
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (lightning_says,) = trainer.validate(module, datamodule=datamodule, verbose=False)
    return trainer, module, lightning_says


def by_hand(net, loader) -> tuple[float, float]:
    """Mean cross-entropy per sample and top-1 accuracy, counted without hpml or Lightning."""
    loss = correct = total = 0.0
    with torch.no_grad():
        for x, y in loader:
            logits = net.eval()(x)
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
            total += len(y)
    return loss / total, correct / total


def test_validation_quality_matches_lightning_and_a_hand_count(validated):
    trainer, module, lightning_says = validated
    found = validation_quality(module, val_loader(trainer), None)
    loss, acc = by_hand(module.net, val_loader(trainer))
    # 70 samples in batches of 32, 32, 6: the last batch weighs 6/70, not 1/3
    assert found["val/loss"] == pytest.approx(loss, rel=1e-5)
    assert found["val/acc"] == pytest.approx(acc, abs=1e-6)
    assert found["val/loss"] == pytest.approx(lightning_says["val/loss"], rel=1e-5)
    assert found["val/acc"] == pytest.approx(lightning_says["val/acc"], abs=1e-6)


def test_measure_judges_the_variant_in_place_and_puts_the_net_back(validated):
    trainer, module, _ = validated
    variant = copy.deepcopy(module.net)
    with torch.no_grad():
        variant.fc.bias.add_(torch.tensor([50.0, -50.0]))  # always class 0
    settings = Settings(batch_size=16, rounds=2, warmup=0, eval_batches=None)
    found = measure(trainer, module, "stage", settings, variant)
    assert module.net is not variant
    labels = torch.cat([y for _, y in val_loader(trainer)])
    assert found["stage/val_acc_pct"] == pytest.approx(100 * float((labels == 0).float().mean()))
    loss, _ = by_hand(variant, val_loader(trainer))
    assert found["stage/val_loss_nats"] == pytest.approx(loss, rel=1e-5)
    assert found["stage/size_bytes"] == state_dict_bytes(variant)
    for name in ("latency_b1_ms", "latency_b1_p90_ms", "latency_b16_ms", "latency_b16_p90_ms"):
        assert found[f"stage/{name}"] > 0


def test_eval_batches_bounds_the_batches_judged(validated):
    trainer, module, _ = validated
    first = next(iter(val_loader(trainer)))
    loss, _ = by_hand(module.net, [first])
    one = measure(trainer, module, "s", Settings(8, rounds=1, warmup=0, eval_batches=1))
    assert one["s/val_loss_nats"] == pytest.approx(loss, rel=1e-5)
    none = measure(trainer, module, "s", Settings(8, rounds=1, warmup=0, eval_batches=0))
    assert not any("val_" in name for name in none)


@pytest.mark.parametrize(
    "values,key",
    [
        ((0, 20, 3, 4), "latency_batch_size"),
        ((8, 0, 3, 4), "latency_rounds"),
        ((8, 20, -1, 4), "latency_warmup"),
        ((8, 20, 3, -2), "eval_batches"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(values, key):
    with pytest.raises(ConfigError) as info:
        Settings.checked(*values)
    assert str(info.value).startswith(f"{key}=")
