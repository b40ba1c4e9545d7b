"""Case ``prune``: inference latency of pruned models against the unpruned ones, side by side.

On :func:`hpml.analysis.devices.default_device` (nets pruned on the CPU, then moved), each VGG of
:func:`configurations` unpruned, with half of every layer's filters or rows but the output
layer's removed (L1 norms), with 50% L1 masks folded into the weights (same shapes, so no goal),
and with 70% removed at exact widths and at widths rounded to multiples of 8 (``round_to``: VGG's
widths are powers of two, so 50% keeps multiples of 8 either way): VGG11-CIFAR, and on a GPU also
VGG16-ImageNet at 224 px, batch 64, in bf16, where arithmetic rather than kernel launches bounds
a forward pass (:mod:`hpml.bench.workloads`); study 1's LSTM unpruned and with half its hidden
units removed. Ratios are unpruned / pruned latency.
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
from hpml.bench.workloads import VGG16_IMAGENET, Workload, vgg11_cifar
from hpml.models.nets.lstm import LSTMClassifier
from hpml.optimize.prune import Method, apply_prune
from hpml.optimize.prune.methods import L1Structured, L2Structured

AMOUNT = 0.5
LATENCY = "latency_ms"
PHYSICAL, MASK = "physical 50%", "mask 50%"
ROUNDED = 0.7  # an amount whose exact widths are no multiples of 8 (64 channels keep 19)
EXACT, ROUND_8 = "physical 70%", "physical 70% round_to 8"
PRUNINGS = (  # variant name -> pruning mode, amount, round_to
    (PHYSICAL, "physical", AMOUNT, 1),
    (MASK, "mask", AMOUNT, 1),
    (EXACT, "physical", ROUNDED, 1),
    (ROUND_8, "physical", ROUNDED, 8),
)
LSTM, LSTM_HALF = "lstm", "lstm half hidden"
LSTM_RATIO = Ratio(
    "LSTM half hidden speedup", LATENCY, "ms", LSTM, LSTM_HALF, goal=2.0, speedup=True
)


def configurations(device: torch.device) -> list[Workload]:
    """The VGGs timed on ``device``: VGG11-CIFAR (batch 32 on the CPU, 128 on a GPU), and on a GPU
    VGG16-ImageNet at 224 px, batch 64."""
    if device.type != "cuda":
        return [vgg11_cifar(32)]
    return [vgg11_cifar(128), VGG16_IMAGENET]


def dtype_of(workload: Workload, device: torch.device) -> torch.dtype:
    """bf16 for the GPU's 224 px VGG16, where tensor cores run its convolutions and channel
    counts decide their tiles; fp32 for the rest."""
    return torch.bfloat16 if device.type == "cuda" and workload is VGG16_IMAGENET else torch.float32


def vgg_ratios(workload: Workload) -> list[Ratio]:
    """Unpruned / physically pruned latency (goal 3x), / masked (no goal: same shapes), and /
    70% pruned at exact and at rounded widths (no goal: what rounding buys shows between them)."""
    label = workload.label
    physical, mask = f"{label} {PHYSICAL}", f"{label} {MASK}"
    exact, rounded = f"{label} {EXACT}", f"{label} {ROUND_8}"
    return [
        Ratio(f"{physical} speedup", LATENCY, "ms", label, physical, goal=3.0, speedup=True),
        Ratio(f"{mask} speedup (~1.0)", LATENCY, "ms", label, mask, speedup=True),
        Ratio(f"{exact} speedup", LATENCY, "ms", label, exact, speedup=True),
        Ratio(f"{rounded} speedup", LATENCY, "ms", label, rounded, speedup=True),
    ]


def pruned(
    build: Callable[[], nn.Module],
    example: torch.Tensor,
    method: Method,
    mode: str,
    amount: float = AMOUNT,
    round_to: int = 1,
) -> nn.Module:
    net = apply_prune(build().eval(), method, amount, example[:2], mode, round_to=round_to).module
    return net.eval()


def latency(model: nn.Module, example: torch.Tensor, settings: Settings) -> Measurement:
    """The median milliseconds of one round's forward passes, at the bench's threads."""
    torch.set_num_threads(settings.threads)
    return {LATENCY: measure_latency(model, example, settings.steps, settings.warmup)}


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    device = default_device()
    batch = 128 if device.type == "cuda" else 32  # the LSTM's
    torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    tokens = torch.randint(1, 20_000, (batch, 200))
    build_lstm = partial(LSTMClassifier, 20_000, embedding_dim=400, hidden_size=256, num_layers=2)
    models: dict[str, tuple[nn.Module, torch.Tensor]] = {}
    dtypes: dict[str, torch.dtype] = {}
    for workload in configurations(device):
        images = workload.images()
        models[workload.label] = (workload.net().eval(), images)
        for name, mode, amount, round_to in PRUNINGS:
            net = pruned(workload.net, images, L1Structured(), mode, amount, round_to)
            models[f"{workload.label} {name}"] = (net, images)
        dtype = dtype_of(workload, device)
        dtypes |= {name: dtype for name in models if name.startswith(workload.label)}
    models[LSTM] = (build_lstm().eval(), tokens)
    models[LSTM_HALF] = (pruned(build_lstm, tokens, L2Structured(), "physical"), tokens)
    ratios = [r for w in configurations(device) for r in vgg_ratios(w)] + [LSTM_RATIO]
    variants = {
        name: partial(
            latency,
            model.to(device, dtypes.get(name, torch.float32)),
            example.to(device, dtypes[name]) if name in dtypes else example.to(device),
            settings,
        )
        for name, (model, example) in models.items()
    }
    notes = {
        "batch_size": {name: len(example) for name, (_, example) in models.items()},
        "amount": AMOUNT,
        "dtype": {name: str(dtype).removeprefix("torch.") for name, dtype in dtypes.items()},
        "device": device_name(device),
        "torch": torch.__version__,
        "params": {name: param_count(m) for name, (m, _) in models.items()},
        "vgg": "vgg11 cifar layout with batch norm; vgg16 imagenet layout without (study 2's); "
        "L1 filter norms; output layer excluded",
        "round_to": "70%: 64 -> 19 channels exact, 16 with round_to 8 (torch-pruning's rounding)",
        "lstm": "embedding 400, hidden 256 -> 128, 2 layers, seq 200, vocab 20000; L2 unit norms",
        "timing": "median ms of settings.steps eval forward passes per round (inference_mode)",
    }
    return run_case("prune", variants, ratios, settings, report, notes)
