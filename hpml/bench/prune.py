"""Case ``prune``: inference latency of pruned models against the unpruned ones, side by side.

On :func:`hpml.analysis.devices.default_device` (nets pruned on the CPU, then moved): VGG11-CIFAR
unpruned, with half of every conv's filters removed (L1 norms), and with 50% L1 masks folded
into the weights (same shapes, so no goal); with 70% removed at exact widths and rounded to
multiples of 8 (``round_to``); study 1's LSTM unpruned and with half its hidden units removed.
Ratios are unpruned / pruned latency.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn

from hpml.analysis.devices import default_device, device_name
from hpml.analysis.latency import measure_latency
from hpml.analysis.model_stats import param_count
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vgg import vgg
from hpml.optimize.prune import Method, apply_prune
from hpml.optimize.prune.methods import L1Structured, L2Structured

AMOUNT = 0.5
LATENCY = "latency_ms"
VGG, VGG_PHYSICAL, VGG_MASK = "vgg11", "vgg11 physical 50%", "vgg11 mask 50%"
LSTM, LSTM_HALF = "lstm", "lstm half hidden"
ROUNDED = 0.7  # its exact widths (19, 38, 77, 154 channels) are no multiples of 8
VGG_EXACT, VGG_ROUND_8 = "vgg11 physical 70%", "vgg11 physical 70% round_to 8"
RATIOS = (
    Ratio("VGG11 physical 50% speedup", LATENCY, "ms", VGG, VGG_PHYSICAL, goal=3.0, speedup=True),
    Ratio("VGG11 mask 50% speedup (~1.0)", LATENCY, "ms", VGG, VGG_MASK, speedup=True),
    Ratio("LSTM half hidden speedup", LATENCY, "ms", LSTM, LSTM_HALF, goal=2.0, speedup=True),
    Ratio("VGG11 physical 70% speedup", LATENCY, "ms", VGG, VGG_EXACT, speedup=True),
    Ratio("VGG11 physical 70% round_to=8 speedup", LATENCY, "ms", VGG, VGG_ROUND_8, speedup=True),
)


def pruned(
    build: Callable[[], nn.Module],
    example: torch.Tensor,
    method: Method,
    mode: str,
    amount: float = AMOUNT,
    round_to: int = 1,
) -> nn.Module:
    net = apply_prune(build().eval(), method, amount, example[:2], mode, round_to=round_to)[0]
    return net.eval()


def timer(model: nn.Module, example: torch.Tensor, settings: Settings):
    def measure() -> Measurement:
        torch.set_num_threads(settings.threads)
        return {LATENCY: measure_latency(model, example, settings.steps, settings.warmup)}

    return measure


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    device = default_device()
    batch = 128 if device.type == "cuda" else 32
    torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    images = torch.randn(batch, 3, 32, 32)
    tokens = torch.randint(1, 20_000, (batch, 200))
    build_vgg = partial(vgg, 11)
    build_lstm = partial(LSTMClassifier, 20_000, embedding_dim=400, hidden_size=256, num_layers=2)
    models = {
        VGG: (build_vgg().eval(), images),
        VGG_PHYSICAL: (pruned(build_vgg, images, L1Structured(), "physical"), images),
        VGG_MASK: (pruned(build_vgg, images, L1Structured(), "mask"), images),
        VGG_EXACT: (pruned(build_vgg, images, L1Structured(), "physical", ROUNDED), images),
        VGG_ROUND_8: (pruned(build_vgg, images, L1Structured(), "physical", ROUNDED, 8), images),
        LSTM: (build_lstm().eval(), tokens),
        LSTM_HALF: (pruned(build_lstm, tokens, L2Structured(), "physical"), tokens),
    }
    variants = {
        name: timer(model.to(device), example.to(device), settings)
        for name, (model, example) in models.items()
    }
    notes = {
        "batch_size": batch,
        "amount": AMOUNT,
        "device": device_name(device),
        "torch": torch.__version__,
        "params": {name: param_count(m) for name, (m, _) in models.items()},
        "vgg": "vgg11 cifar layout, batch norm; L1 filter norms; classifier excluded",
        "round_to": "70%: 64 -> 19 channels exact, 16 with round_to 8 (torch-pruning's rounding)",
        "lstm": "embedding 400, hidden 256 -> 128, 2 layers, seq 200, vocab 20000; L2 unit norms",
        "timing": "median ms of settings.steps eval forward passes per round (inference_mode)",
    }
    return run_case("prune", variants, RATIOS, settings, report, notes)
