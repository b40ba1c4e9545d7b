"""Roofline points: bytes by hand count, intensity, classification against a table roof."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpml.analysis.devices import KNOWN_DEVICES
from hpml.analysis.roofline import (
    RooflinePoint,
    analyse,
    attainable_flops_per_s,
    classify,
    layer_bytes,
)

V100 = KNOWN_DEVICES["v100"]
F32 = 4


class Add(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def test_large_gemm_is_compute_bound_on_v100():
    n = 4096
    model = nn.Sequential(nn.Linear(n, n)).to("meta")  # shapes only: nothing is computed
    analysis = analyse(model, torch.empty(n, n, device="meta"), timing_passes=0)
    (layer,) = analysis.layers
    assert layer.flops == 2 * n**3
    assert layer.bytes == F32 * (n * n + n * n + n + n * n)  # input, weight, bias, output
    assert layer.intensity == layer.flops / layer.bytes  # about 680 FLOP/byte
    assert classify(layer, V100) == "compute-bound"
    assert classify(analysis.model, V100) == "compute-bound"


class _Call(nn.Module):
    """Runs ``inner`` on its inputs, so ``inner`` is a hooked leaf."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.inner(*args)


def test_elementwise_add_is_memory_bound_on_v100():
    n = 1 << 20
    moved = layer_bytes(_Call(Add()), (torch.ones(n), torch.ones(n)))
    assert moved == {"inner": 3 * F32 * n}  # read a, read b, write the sum
    # one FLOP per element: more than the 2 x MAC convention gives an add (0), still far left
    point = RooflinePoint("add", n, moved["inner"])
    assert point.intensity == 1 / 12
    assert classify(point, V100) == "memory-bound"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_bytes_equal_a_hand_count(dtype):
    batch, n_in, n_out = 8, 32, 16
    model = nn.Sequential(nn.Linear(n_in, n_out)).to(dtype)
    size = torch.tensor([], dtype=dtype).element_size()
    hand = size * (batch * n_in + n_out * n_in + n_out + batch * n_out)
    assert layer_bytes(model, torch.ones(batch, n_in, dtype=dtype)) == {"0": hand}


def test_in_place_layer_reads_and_writes_and_repeated_calls_add_up():
    relu = nn.ReLU(inplace=True)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = relu
            self.bn = nn.BatchNorm1d(10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.bn(self.relu(x)))

    moved = layer_bytes(Twice(), torch.ones(4, 10))
    assert moved["relu"] == 2 * (2 * F32 * 40)  # in + out, per call, two calls
    # input, output, weight, bias, running mean and var, and the int64 batch counter
    assert moved["bn"] == F32 * (40 + 40 + 4 * 10) + 8


def test_model_point_sums_layers_and_timed_points_have_rates():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    analysis = analyse(model, torch.randn(4, 3, 8, 8), timing_passes=2)
    assert [p.label for p in analysis.layers] == ["0", "1", "2", "3"]
    assert [p.kind for p in analysis.layers] == ["Conv2d", "ReLU", "Flatten", "Linear"]
    assert analysis.model.bytes == sum(p.bytes for p in analysis.layers)
    assert analysis.model.flops == sum(p.flops for p in analysis.layers)
    assert analysis.model.flops == 2 * (4 * 8 * 6 * 6 * 3 * 9 + 4 * 288 * 10)
    assert analysis.batch_size == 4
    assert analysis.flops_per_sample == analysis.model.flops / 4
    for point in [*analysis.layers, analysis.model]:
        assert point.seconds is not None and point.seconds > 0
        assert point.flops_per_s == point.flops / point.seconds
    assert classify(analysis.layers[1], V100) == "memory-bound"  # ReLU: no FLOPs


def test_ridge_splits_the_bounds_and_precision_moves_the_ridge():
    at_ridge = RooflinePoint("ridge", V100.ridge_for_precision("32-true", tf32=False) * 1000, 1000)
    assert classify(at_ridge, V100) == "compute-bound"
    middle = RooflinePoint("conv", 50.0, 1.0)  # right of the fp32 ridge, left of the fp16 one
    assert classify(middle, V100, "32-true") == "compute-bound"
    assert classify(middle, V100, "16-mixed") == "memory-bound"
    assert attainable_flops_per_s(1.0, V100) == 900e9
    assert attainable_flops_per_s(1000.0, V100) == 15.7e12
    assert RooflinePoint("untimed", 1.0, 1.0).flops_per_s is None
