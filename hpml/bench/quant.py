"""Case ``quant``: what int8 and compilation buy at inference on CPU, side by side.

Variants, each built (quantised, compiled) once before the rounds: VGG11-CIFAR fp32, static
int8, ``torch.compile`` as ``compile=torch_compile`` runs it on CPU and TorchScript trace +
freeze (their conv operators and profiler tables printed: docs/quantisation-compilation.md);
VGG11 pruned to half its channels, then static int8; ResNet18 fp32 and static int8 through PT2E;
study 1's LSTM fp32 and dynamic int8. Each round times ``steps`` forward calls at batch
``BATCH`` and weighs the state dict; ratios are fp32 / variant (speed-up, size reduction).
"""

from __future__ import annotations

import copy
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from hpml.analysis.latency import measure_latency
from hpml.analysis.model_stats import state_dict_bytes
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vgg import CifarVGG
from hpml.optimize.compile import apply_compile, conv_kernels, fast_path
from hpml.optimize.compile.torch_compile import TorchCompile
from hpml.optimize.compile.torchscript import Torchscript
from hpml.optimize.quant.methods import dynamic_int8, static_int8

BATCH = 32
VOCAB, SEQ_LEN = 83828, 200
VGG, VGG_INT8, VGG_COMPILED = "vgg11 fp32", "vgg11 static int8", "vgg11 torch.compile"
VGG_TORCHSCRIPT = "vgg11 torchscript"
VGG_PRUNED_INT8 = "vgg11 pruned 50% + static int8"
LSTM, LSTM_INT8 = "lstm fp32", "lstm dynamic int8"
RESNET, RESNET_INT8 = "resnet18 fp32", "resnet18 static int8 (pt2e)"
LATENCY, SIZE, CPU = "latency_ms", "size_bytes", "cpu_ms"


def _speedup(label: str, base: str, variant: str, goal: float | None = None, key: str = LATENCY):
    """``base`` / ``variant`` latency, or CPU time where ``key`` is :data:`CPU`."""
    label += " speed-up" + (", CPU time" if key == CPU else "")
    return Ratio(label, key, "ms", base, variant, goal=goal, speedup=True)


def _reduction(label: str, base: str, variant: str, size: float) -> Ratio:
    """``base`` / ``variant`` bytes; goal: the variant at most ``size`` times the base."""
    label += f" size reduction (size <= {size:g}x)"
    return Ratio(label, SIZE, "bytes", base, variant, goal=1 / size)


RATIOS = (
    _speedup("VGG11 static int8", VGG, VGG_INT8, 4.0),
    _reduction("VGG11 static int8", VGG, VGG_INT8, 0.26),
    _speedup("LSTM dynamic int8", LSTM, LSTM_INT8, 1.5),
    _reduction("LSTM dynamic int8", LSTM, LSTM_INT8, 0.27),
    _speedup("VGG11 torch.compile", VGG, VGG_COMPILED, 1.2),
    _speedup("ResNet18 static int8 (pt2e)", RESNET, RESNET_INT8),
    _reduction("ResNet18 static int8 (pt2e)", RESNET, RESNET_INT8, 0.27),
    _speedup("VGG11 TorchScript (freeze)", VGG, VGG_TORCHSCRIPT),
    _speedup("VGG11 torch.compile", VGG, VGG_COMPILED, 1.2, CPU),
    _speedup("VGG11 TorchScript (freeze)", VGG, VGG_TORCHSCRIPT, key=CPU),
    _speedup("VGG11 pruned 50% + static int8", VGG, VGG_PRUNED_INT8, 15.0),
)


def cpu_ms(model: nn.Module, example: Any, steps: int) -> float:
    """Median CPU milliseconds of this thread per ``model(example)`` call: with one torch thread
    the model's cost without the time a neighbour's load kept it waiting for a core."""
    times = []
    with torch.inference_mode():
        for _ in range(steps):
            start = time.thread_time()
            model(example)
            times.append(1e3 * (time.thread_time() - start))
    return statistics.median(times)


def variant(model: nn.Module, example: Any, settings: Settings, size: int | None = None):
    """Times ``model(example)``; its size is its own state dict's unless ``size`` is given."""
    size = state_dict_bytes(model) if size is None else size

    def measure() -> Measurement:
        torch.set_num_threads(settings.threads)
        latency = measure_latency(model, example, settings.steps, settings.warmup)
        found = {LATENCY: latency, SIZE: float(size)}
        if settings.threads == 1:
            found[CPU] = cpu_ms(model, example, settings.steps)
        return found

    return measure


def pruned_int8(vgg: nn.Module, calibration: list[torch.Tensor]) -> nn.Module:
    """A copy of ``vgg`` with half the channels of every conv removed, then static int8."""
    from hpml.optimize.prune import apply_prune
    from hpml.optimize.prune.methods import L1Structured

    pruned = copy.deepcopy(vgg)
    apply_prune(pruned, L1Structured(), 0.5, calibration[0][:1], "physical")
    return static_int8(backend="torch_ao").quantize(pruned.eval(), calibration)


def profile_tables(models: dict[str, nn.Module], images: torch.Tensor, calls: int = 3) -> str:
    """torch.profiler's operator table (self CPU time, top rows) of each model over ``calls``
    forward passes after an untimed one: where eager and compiled inference spend their time."""
    from torch.profiler import ProfilerActivity, profile

    parts = []
    for name, model in models.items():
        with torch.inference_mode():
            model(images)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(calls):
                    model(images)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=6)
        parts.append(f"{name}, {calls} forward passes at batch {len(images)}:\n{table}")
    return "\n".join(parts)


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    images = torch.randn(BATCH, 3, 32, 32)
    tokens = torch.randint(1, VOCAB, (BATCH, SEQ_LEN))

    vgg = CifarVGG(11).eval()
    calibration = [torch.randn(BATCH, 3, 32, 32) for _ in range(8)]
    vgg_int8 = static_int8(backend="torch_ao").quantize(copy.deepcopy(vgg), calibration)
    vgg_pruned_int8 = pruned_int8(vgg, calibration)
    vgg_copy = copy.deepcopy(vgg)  # channels_last converts the compiled net's weights in place
    start = time.perf_counter()
    frozen = TorchCompile(freezing=True, channels_last=True)
    compiled = apply_compile(vgg_copy, frozen, [images], bench_dir / "inductor")
    compile_s = time.perf_counter() - start
    scripted = apply_compile(vgg, Torchscript(), [images], bench_dir / "torchscript")

    resnet = torchvision.models.resnet18(num_classes=10).eval()
    pt2e = static_int8(backend="pt2e")
    resnet_int8 = pt2e.quantize(copy.deepcopy(resnet), calibration)

    lstm = LSTMClassifier(VOCAB, 2, embedding_dim=400, hidden_size=256, num_layers=2).eval()
    lstm_int8 = dynamic_int8().quantize(copy.deepcopy(lstm))

    vgg_bytes = state_dict_bytes(vgg)
    variants = {
        VGG: variant(vgg, images, settings, vgg_bytes),
        VGG_INT8: variant(vgg_int8, images, settings),
        VGG_COMPILED: variant(compiled.module, images, settings, vgg_bytes),
        VGG_TORCHSCRIPT: variant(scripted.module, images, settings, vgg_bytes),
        VGG_PRUNED_INT8: variant(vgg_pruned_int8, images, settings),
        RESNET: variant(resnet, images, settings),
        RESNET_INT8: variant(resnet_int8, images, settings),
        LSTM: variant(lstm, tokens, settings),
        LSTM_INT8: variant(lstm_int8, tokens, settings),
    }
    print(profile_tables({VGG: vgg, VGG_COMPILED: compiled.module}, images))
    kernels = {
        VGG: conv_kernels(vgg, images),
        VGG_COMPILED: compiled.report.conv_kernels,
        VGG_TORCHSCRIPT: scripted.conv_kernels,
    }
    for name, called in kernels.items():
        path = "fast path" if fast_path(called) else "not the pre-packed fast path"
        print(f"conv kernels: {name}: {', '.join(called) or 'none recorded'} ({path})")
    notes = {
        "batch_size": BATCH,
        "device": "cpu",
        "torch": torch.__version__,
        "quantized_engine": torch.backends.quantized.engine,
        "torch_compile_seconds": compile_s,
        "torch_compile_options": "mode default, freezing, channels_last",
        "compile_output_max_abs_diff": compiled.report.max_abs_diff,
        **{f"conv_kernels {name}": ", ".join(called) for name, called in kernels.items()},
        "resnet18_pt2e_compile_seconds": pt2e.compile_time_s,
        "lstm": f"vocab {VOCAB}, embedding 400, hidden 256, 2 layers, {SEQ_LEN} tokens",
    }
    ratios = [r for r in RATIOS if r.key != CPU or settings.threads == 1]  # cpu_ms: one thread
    return run_case("quant", variants, ratios, settings, report, notes)
