"""The ``prune`` case's plan: which VGGs it times on which device, and the ratios it reports."""

from __future__ import annotations

import torch

from hpml.bench.__main__ import CASES
from hpml.bench.prune import (
    EXACT,
    LSTM_RATIO,
    MASK,
    PHYSICAL,
    ROUND_8,
    configurations,
    dtype_of,
    vgg_ratios,
)
from hpml.bench.workloads import VGG16_IMAGENET, vgg11_cifar


def test_the_cpu_times_vgg11_cifar_alone_and_a_gpu_adds_vgg16_at_224px():
    assert configurations(torch.device("cpu")) == [vgg11_cifar(32)]
    small, large = configurations(torch.device("cuda"))
    assert small == vgg11_cifar(128)
    assert large == VGG16_IMAGENET
    assert (large.depth, large.layout, large.image_size, large.batch) == (16, "imagenet", 224, 64)


def test_each_vgg_has_a_physical_ratio_with_its_goal_a_mask_ratio_and_both_roundings():
    physical, mask, exact, rounded = vgg_ratios(VGG16_IMAGENET)
    label = "VGG16-ImageNet 224px b64"
    assert (physical.numerator, physical.denominator) == (label, f"{label} {PHYSICAL}")
    assert physical.goal == 3.0 and physical.speedup
    assert (mask.denominator, mask.goal) == (f"{label} {MASK}", None)
    assert (exact.denominator, rounded.denominator) == (f"{label} {EXACT}", f"{label} {ROUND_8}")
    assert LSTM_RATIO.goal == 2.0
    # the GPU's VGG16 in bf16, where tensor cores tile its channels; the rest in fp32
    assert dtype_of(VGG16_IMAGENET, torch.device("cuda")) == torch.bfloat16
    assert dtype_of(vgg11_cifar(128), torch.device("cuda")) == torch.float32
    assert dtype_of(VGG16_IMAGENET, torch.device("cpu")) == torch.float32
    assert "prune" in CASES
