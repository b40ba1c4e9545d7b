"""The ``fuse`` case's measurement at a tiny size: what it reports, never how fast it ran."""

from __future__ import annotations

import pytest
import torch

from hpml.bench.__main__ import CASES
from hpml.bench.fuse import (
    FIRST_LOSS,
    FUSED,
    SAMPLES,
    SERIAL,
    STEP,
    Family,
    measure,
    pristine,
    ratio,
    vae,
    vgg11,
)

CPU = torch.device("cpu")
WEIGHT = {"VAE": "fc1.weight", "VGG11-CIFAR": "classifier.weight"}


@pytest.fixture(autouse=True)
def one_thread():
    """As the bench runs (``--threads 1``): two threads on the shared 2-core machine crawl."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("family", [vae(8), vgg11(2)], ids=["vae", "vgg11"])
def test_fused_and_serial_train_the_same_members_from_the_same_first_loss(family: Family):
    members = pristine(family, 2)
    before = [m.net.state_dict()[WEIGHT[family.name]].clone() for m in members]
    fused = measure(family, members, FUSED, steps=1, warmup=2, device=CPU)
    serial = measure(family, members, SERIAL, steps=1, warmup=2, device=CPU)
    for measured in (fused, serial):
        assert set(measured) == {SAMPLES, STEP, FIRST_LOSS}
        assert measured[STEP] > 0
        assert measured[SAMPLES] == pytest.approx(1e3 * 2 * family.batch_size / measured[STEP])
    # one vmapped forward scores each member as its own net would, the VAE's noise included
    assert fused[FIRST_LOSS] == pytest.approx(serial[FIRST_LOSS], rel=1e-5)
    assert 0 < fused[FIRST_LOSS] < float("inf")
    # variants train copies: the members keep their initial weights for the next round
    after = [m.net.state_dict()[WEIGHT[family.name]] for m in members]
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))


def test_every_round_starts_from_the_same_weights_and_noise():
    family = vae(8)
    members = pristine(family, 2)
    first = [measure(family, members, FUSED, steps=1, warmup=1, device=CPU) for _ in range(2)]
    assert first[0][FIRST_LOSS] == first[1][FIRST_LOSS]


def test_members_differ_in_learning_rate_only():
    members = pristine(vae(8), 3)
    lrs = [m.configure_optimizers().param_groups[0]["lr"] for m in members]
    assert lrs == pytest.approx([1e-4, 1.25e-4, 1.5625e-4])
    weights = [m.net.fc1.weight for m in members]
    assert not torch.equal(weights[0], weights[1])  # each member seeded as its own job


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="fused or serial"):
        measure(vae(4), pristine(vae(4), 2), "parallel", steps=1, warmup=1, device=CPU)


def test_goal_only_for_vae_at_eight_members_on_a_gpu():
    gpu_vae8 = ratio(vae(), 8, steps=8, on_gpu=True)
    assert gpu_vae8.goal == 2.4
    assert (gpu_vae8.numerator, gpu_vae8.denominator) == ("VAE N=8 fused", "VAE N=8 serial")
    cpu_vae8 = ratio(vae(), 8, steps=8, on_gpu=False)
    assert cpu_vae8.goal is None
    assert "goal >= 2.4 on GPU only" in cpu_vae8.metric
    assert ratio(vae(), 16, steps=8, on_gpu=True).goal is None
    assert ratio(vgg11(32), 8, steps=8, on_gpu=True).goal is None
    assert "batch 4, 1 timed step)" in ratio(vgg11(4), 16, steps=1, on_gpu=False).metric


def test_case_is_registered():
    assert "fuse" in CASES


@pytest.mark.usefixtures("after_mlflow_pytorch")
def test_the_barebones_banner_stays_quiet_after_mlflow_imports_pytorch_lightning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``import mlflow.pytorch`` renames the logger Lightning's rank-zero lines go through; the
    bench's trainer still prints none of them."""
    import logging

    from lightning.fabric.utilities.rank_zero import rank_zero_info

    from hpml.bench.fuse import quiet_barebones

    caplog.set_level(logging.INFO)
    with quiet_barebones():
        rank_zero_info("GPU available: False, used: False")
    rank_zero_info("after the bench")
    assert [r.getMessage() for r in caplog.records] == ["after the bench"]


def test_a_gpu_times_the_vae_curve_to_64_members_and_a_cpu_up_to_16():
    from hpml.bench import fuse

    assert fuse.array_sizes(fuse.vae(), torch.device("cuda")) == (1, 2, 4, 8, 16, 32, 64)
    assert fuse.array_sizes(fuse.vae(), torch.device("cpu")) == (2, 4, 8, 16)
    assert fuse.array_sizes(fuse.vgg11(4), torch.device("cuda")) == (2, 4, 8, 16)
