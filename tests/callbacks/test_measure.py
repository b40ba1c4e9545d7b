"""The one before/after measurement: quality as the model's validation_step, variants in place,
latencies side by side with the speed-up's interval and verdict."""

from __future__ import annotations

import copy
import time

import lightning as L
import pytest
import torch
from torch.nn import functional as F

from hpml.analysis.model_stats import state_dict_bytes
from hpml.analysis.stats import SLOWER, Interval, verdict
from hpml.callbacks.measure import (
    Settings,
    Side,
    compare,
    on_trainer_device,
    size_and_quality,
    val_loader,
    validation_quality,
)
from hpml.callbacks.measure_settings import OptimizationStep
from hpml.errors import ConfigError


@pytest.fixture
def validated(composed):
    """An untrained LSTM classifier, its synthetic data and a trainer that ran validate once."""
    from hpml.build import build

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


def test_size_and_quality_judge_the_variant_in_place_and_put_the_net_back(validated):
    trainer, module, _ = validated
    variant = copy.deepcopy(module.net)
    with torch.no_grad():
        variant.fc.bias.add_(torch.tensor([50.0, -50.0]))  # always class 0
    settings = Settings(batch_size=16, rounds=2, min_run_time_s=0.002, eval_batches=None)
    found = size_and_quality(trainer, module, settings, Side("stage", variant, module.device))
    assert module.net is not variant
    labels = torch.cat([y for _, y in val_loader(trainer)])
    assert found["stage/val_acc_pct"] == pytest.approx(100 * float((labels == 0).float().mean()))
    loss, _ = by_hand(variant, val_loader(trainer))
    assert found["stage/val_loss_nats"] == pytest.approx(loss, rel=1e-5)
    assert found["stage/size_bytes"] == state_dict_bytes(variant)
    assert not any("latency" in name for name in found)  # timed only beside another side


def test_eval_batches_bounds_the_batches_judged(validated):
    trainer, module, _ = validated
    first = next(iter(val_loader(trainer)))
    loss, _ = by_hand(module.net, [first])
    side = Side("s", module.net, module.device)
    one = size_and_quality(trainer, module, Settings(8, 1, 0.001, eval_batches=1), side)
    assert one["s/val_loss_nats"] == pytest.approx(loss, rel=1e-5)
    none = size_and_quality(trainer, module, Settings(8, 1, 0.001, eval_batches=0), side)
    assert not any("val_" in name for name in none)


@pytest.mark.parametrize(
    "key,bad",
    [
        ("latency_batch_size", 0),
        ("latency_rounds", 0),
        ("latency_min_run_time_s", 0),
        ("latency_min_run_time_s", "fast"),
        ("eval_batches", -2),
        ("latency_budget_s", -1.0),
        ("latency_budget_s", float("nan")),
        ("latency_ci_width", 0),
        ("latency_clock", "cpu"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(key, bad):
    with pytest.raises(ConfigError) as info:
        OptimizationStep(**{key: bad})
    assert str(info.value).startswith(f"{key}=")


class Slower(torch.nn.Module):
    """``net`` and 20 ms of its thread's CPU time per call: a variant known to be slower, on
    the thread's clock (which the neighbours of a shared machine do not stretch) and the wall's."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        end = time.thread_time() + 0.020
        while time.thread_time() < end:
            pass
        return self.net(x)


@pytest.fixture
def one_thread():
    """Two threads beside busy neighbours on 2 cores stall at their barriers (2.4 ms calls
    measured 80 ms): one thread keeps the LSTM's own time well under the sleep."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_compare_times_both_sides_side_by_side_with_interval_and_verdict(validated, one_thread):
    trainer, module, _ = validated
    settings = Settings(batch_size=4, rounds=9, min_run_time_s=0.005, eval_batches=1, budget_s=0)
    device = module.device
    found = compare(
        trainer,
        module,
        settings,
        "opt",
        Side("opt_before", module.net, device),
        Side("opt_after", Slower(module.net), device),
    )
    m = found.metrics
    for batch in (1, 4):
        quantity = f"opt/speedup_b{batch}"
        low, mid, high = (m[f"{quantity}_ci_low_x"], m[f"{quantity}_x"], m[f"{quantity}_ci_high_x"])
        n = m[f"{quantity}_rounds_count"]
        assert n == 9 and low <= mid <= high
        assert found.tags[f"hpml.verdict.opt.speedup_b{batch}"] == verdict(
            Interval(mid, low, high, int(n), 0.0)
        )
        assert found.tags[f"hpml.compare.opt.speedup_b{batch}_stopped"] == "rounds"
        for side in ("opt_before", "opt_after"):
            assert (
                m[f"{side}/latency_b{batch}_ms"] > 0 and m[f"{side}/latency_b{batch}_iqr_ms"] >= 0
            )
            # one torch thread on the CPU: the rounds ran on the thread's clock, wall beside it
            assert m[f"{side}/latency_b{batch}_thread_cpu_ms"] > 0
            assert m[f"{side}/latency_b{batch}_thread_cpu_iqr_ms"] >= 0
    # 20 ms of spinning against a millisecond LSTM forward at batch 1
    assert m["opt/speedup_b1_x"] < 0.7 and found.tags["hpml.verdict.opt.speedup_b1"] == SLOWER
    assert m["opt_before/val_loss_nats"] == pytest.approx(m["opt_after/val_loss_nats"])
    assert found.tags["hpml.compare.opt.devices"] == "cpu vs cpu"
    assert found.tags["hpml.compare.opt.clock"] == "thread_cpu"
    assert found.lines[-1].startswith("opt: timed on thread CPU time")
    assert found.lines[-1].endswith(
        "batch 1: 9 rounds, rounds fixed; batch 4: 9 rounds, rounds fixed"
    )
    assert found.lines[0].startswith("opt: speed-up at batch 1: ")
    assert found.lines[0].endswith("(n=9, slower)")
    assert not any("p90" in name for name in m)


def test_a_trained_net_goes_back_to_the_trainers_device_after_teardown():
    """Lightning's teardown puts the module on the CPU before ``on_fit_end``; quantisation and
    compilation bring it back to the trainer's device first (here the meta device stands in
    for a GPU), so they measure, and hand the test loop, the net where it trains."""

    class Strategy:
        root_device = torch.device("meta")

    trainer = type("Trainer", (), {"strategy": Strategy()})()
    module = L.LightningModule()
    module.net = torch.nn.Linear(3, 2)
    assert on_trainer_device(trainer, module) == torch.device("meta")
    assert module.device == torch.device("meta") and module.net.weight.is_meta
