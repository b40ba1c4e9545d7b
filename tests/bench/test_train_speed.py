"""The ``train_speed`` case: which nets and variants run on which device, its steps, its GPU run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from hpml.analysis.devices import default_device
from hpml.bench.harness import Settings
from hpml.bench.train_speed import (
    BATCH,
    BF16,
    CHANNELS_LAST,
    COMPILED,
    CUDA_BATCH,
    CUDA_GRAPHS,
    EAGER,
    FP16,
    STEP,
    THROUGHPUT,
    Config,
    bf16_native,
    configurations,
    run,
    step_seconds,
    trainer_step,
    variant,
)
from hpml.bench.workloads import vgg11_cifar

CUDA = torch.device("cuda")
CPU = torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is the one chosen there")
def test_without_a_gpu_the_case_times_vgg11_cifar_alone():
    device = default_device()
    assert device == CPU
    in_rounds = (EAGER, COMPILED, CHANNELS_LAST, *((BF16,) if bf16_native() else ()))
    assert configurations(device, bf16_native()) == [Config(vgg11_cifar(BATCH), in_rounds)]
    assert BATCH == 16


def test_on_a_gpu_vgg16_at_224px_joins_and_cuda_graphs_time_the_launch_bound_vgg11():
    small, large = configurations(CUDA, bf16_in_rounds=False)
    assert small.workload == vgg11_cifar(CUDA_BATCH) and CUDA_BATCH > BATCH
    assert small.variants == (EAGER, COMPILED, CUDA_GRAPHS, CHANNELS_LAST, BF16, FP16)
    w = large.workload
    assert (w.depth, w.layout, w.image_size, w.batch, w.batch_norm) == (
        16,
        "imagenet",
        224,
        64,
        False,
    )
    assert large.variants == (EAGER, COMPILED, CHANNELS_LAST, BF16, FP16)
    assert large.name(EAGER) == "VGG16-ImageNet 224px b64 eager"
    with torch.device("meta"):  # the net study 2 trains, and the images it takes
        assert w.net()(torch.empty(w.batch, 3, w.image_size, w.image_size)).shape == (64, 1000)
    for cpu in configurations(CPU, bf16_in_rounds=True):
        assert FP16 not in cpu.variants and CUDA_GRAPHS not in cpu.variants


def test_a_cpu_variant_is_the_median_step_and_its_samples_per_second():
    calls: list[int] = []
    measure = variant(lambda: calls.append(1), Settings(rounds=1, steps=3, warmup=2))
    m = measure()
    assert len(calls) == 5
    assert m[STEP] > 0 and m[THROUGHPUT] == pytest.approx(BATCH / (m[STEP] / 1e3))
    m = variant(lambda: None, Settings(rounds=1, steps=2, warmup=0), batch=64)()
    assert m[THROUGHPUT] == pytest.approx(64 / (m[STEP] / 1e3))
    assert len(step_seconds(lambda: None, 4, torch.device("cpu"))) == 4


def test_a_scaled_step_updates_the_weights_as_an_unscaled_one():
    torch.manual_seed(0)
    images, labels = torch.randn(4, 3, 4, 4), torch.randint(0, 10, (4,))
    plain = nn.Sequential(nn.Flatten(), nn.Linear(48, 10))
    scaled = nn.Sequential(nn.Flatten(), nn.Linear(48, 10))
    scaled.load_state_dict(plain.state_dict())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    trainer_step(plain, images, labels)()
    trainer_step(scaled, images, labels, scaler=scaler)()
    for a, b in zip(plain.parameters(), scaled.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert scaler.get_scale() == 2.0**8  # no overflow: the scale is kept


@pytest.mark.gpu
def test_on_cuda_every_variant_trains_and_the_mixed_precisions_run_in_half(tmp_path: Path):
    from lightning.pytorch.plugins.precision import MixedPrecision

    from hpml.models.nets.vgg import CifarVGG

    settings = Settings(rounds=2, steps=2, warmup=1, threads=1)
    result = run(settings, tmp_path, lambda *_: None)
    assert result.notes["device"] == torch.cuda.get_device_name(CUDA)
    configs = configurations(CUDA, bf16_in_rounds=True)
    assert result.notes["batch_size"] == {
        "VGG11-CIFAR 32px b128": 128,
        "VGG16-ImageNet 224px b64": 64,
    }
    names = {c.name(v) for c in configs for v in c.variants}
    for done in result.rounds:
        assert set(done.measurements) == names
        for m in done.measurements.values():
            assert math.isfinite(m[STEP]) and m[STEP] > 0
            assert math.isfinite(m[THROUGHPUT]) and m[THROUGHPUT] > 0
    assert {s.ratio.denominator for s in result.summaries} == names - {
        c.name(EAGER) for c in configs
    }
    assert all(math.isfinite(s.median) and s.median > 0 for s in result.summaries)
    assert result.notes["cudagraph_skips"] == 0  # the CUDA graphs variant replayed graphs

    images = torch.randn(8, 3, 32, 32, device=CUDA)
    labels = torch.randint(0, 10, (8,), device=CUDA)
    for precision, dtype in (("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)):
        net = CifarVGG(11).to(CUDA).train()
        seen: list[torch.dtype] = []
        conv = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
        conv.register_forward_hook(lambda _m, _i, out, seen=seen: seen.append(out.dtype))
        plugin = MixedPrecision(precision, "cuda")
        before = conv.weight.detach().clone()
        trainer_step(net, images, labels, plugin.forward_context, plugin.scaler)()
        assert seen == [dtype]
        assert conv.weight.dtype == torch.float32
        # the step updated the fp32 weights, or the scaler skipped it on an overflow and
        # lowered its scale (its first scale, 2**16, may overflow fp16 gradients)
        moved = not torch.equal(conv.weight, before)
        assert moved or plugin.scaler.get_scale() < 2.0**16
