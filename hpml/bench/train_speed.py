"""Case ``train_speed``: what compiled training, channels_last and mixed precision buy per step.

Each variant trains its own copy of one VGG11-CIFAR on the same random batch, on
:func:`hpml.analysis.devices.default_device`, as hpml runs it: ``eager``; ``compiled``
(``compile.train=true``); ``channels_last``; ``bf16 autocast`` (``trainer=bf16``); on a GPU
``fp16 autocast`` with its ``GradScaler``. Ratios are eager / variant step time (CPU figures:
docs/metrics.md). A CPU without bf16 instructions runs bf16 convolutions through slow
reference paths, so there one bf16 step is timed once, beside an eager step, in the notes.
"""

from __future__ import annotations

import copy
import itertools
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from torch import nn

from hpml.analysis.devices import default_device, device_name
from hpml.analysis.timing import call_seconds, synchronized_now
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.models.nets.vgg import CifarVGG
from hpml.optimize.compile import DISPATCH_ONLY
from hpml.optimize.compile.training import compile_for_training

BATCH = 16  # on the CPU
CUDA_BATCH = 128  # on a GPU: batch 16 would time kernel launches, not the device
EAGER, COMPILED, CHANNELS_LAST = "eager", "compiled", "channels_last"
BF16, FP16 = "bf16 autocast", "fp16 autocast"
STEP, THROUGHPUT = "step_time_ms", "throughput_samples_per_s"
CPU = torch.device("cpu")


def batch_size(device: torch.device) -> int:
    return CUDA_BATCH if device.type == "cuda" else BATCH


def variant_names(device: torch.device, bf16_in_rounds: bool) -> tuple[str, ...]:
    """The variants timed in rounds, eager first: bf16 always on a GPU, on a CPU only with
    bf16 instructions (``bf16_in_rounds``); fp16 with its scaler on a GPU only."""
    if device.type == "cuda":
        return (EAGER, COMPILED, CHANNELS_LAST, BF16, FP16)
    return (EAGER, COMPILED, CHANNELS_LAST, *((BF16,) if bf16_in_rounds else ()))


def trainer_step(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    context: Callable[[], AbstractContextManager] = nullcontext,
    scaler: torch.amp.GradScaler | None = None,
) -> Callable[[], None]:
    """One optimiser step of ``net`` on the batch (SGD with momentum, cross-entropy).

    Args:
        context: made afresh around forward and loss each step (autocast).
        scaler: where given, the gradient scaling Lightning's ``16-mixed`` plugin does.
    """
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with context():
            loss = nn.functional.cross_entropy(net(images), labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
            return
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()

    return step


def step_seconds(step: Callable[[], None], steps: int, device: torch.device) -> list[float]:
    """Seconds of each of ``steps`` calls of ``step``: host clock on the CPU; on a GPU, CUDA
    events between steps, synchronised before and after the block only, so the host queues
    step after step as in training."""
    if device.type != "cuda":
        return call_seconds(step, steps, device)
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    synchronized_now(device)
    marks[0].record()
    for mark in marks[1:]:
        step()
        mark.record()
    synchronized_now(device)
    return [start.elapsed_time(end) / 1e3 for start, end in itertools.pairwise(marks)]


def variant(
    step: Callable[[], None], settings: Settings, device: torch.device = CPU
) -> Callable[[], Measurement]:
    def measure() -> Measurement:
        torch.set_num_threads(settings.threads)
        for _ in range(settings.warmup):
            step()
        median = statistics.median(step_seconds(step, settings.steps, device))
        return {STEP: 1e3 * median, THROUGHPUT: batch_size(device) / median}

    return measure


def once_ms(step: Callable[[], None]) -> float:
    """Milliseconds of one step after an untimed one."""
    return 1e3 * call_seconds(step, 1, CPU, warmup=1)[0]


def step_kernels(step: Callable[[], None]) -> tuple[str, ...]:
    """The convolution operators one training step calls, after an untimed one."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = {event.key for event in prof.key_averages()}
    return tuple(sorted(n for n in names if "conv" in n and n not in DISPATCH_ONLY))


def bf16_native() -> bool:
    """Whether this CPU has bf16 instructions (x86 flags; False where /proc/cpuinfo is absent)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def device_notes(device: torch.device) -> dict[str, object]:
    """The CPU's bf16 instructions, or the GPU's CUDA and fp32 (TF32) settings."""
    if device.type != "cuda":
        return {"cpu_bf16_native": bf16_native()}
    return {
        "cuda": torch.version.cuda,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    from lightning.pytorch.plugins.precision import MixedPrecision

    device = default_device()
    batch = batch_size(device)
    torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    images = torch.randn(batch, 3, 32, 32).to(device)
    labels = torch.randint(0, 10, (batch,)).to(device)
    eager = CifarVGG(11).to(device).train()

    compiled, compile_s = compile_for_training(
        copy.deepcopy(eager), [images], bench_dir / "inductor_train"
    )
    nhwc = copy.deepcopy(eager).to(memory_format=torch.channels_last)
    nhwc_images = images.contiguous(memory_format=torch.channels_last)
    bf16 = MixedPrecision("bf16-mixed", device.type).forward_context
    bf16_step = trainer_step(copy.deepcopy(eager), images, labels, bf16)
    steps = {
        EAGER: trainer_step(eager, images, labels),
        COMPILED: trainer_step(compiled, images, labels),
        CHANNELS_LAST: trainer_step(nhwc, nhwc_images, labels),
        BF16: bf16_step,
    }
    if device.type == "cuda":
        fp16 = MixedPrecision("16-mixed", device.type)
        steps[FP16] = trainer_step(
            copy.deepcopy(eager), images, labels, fp16.forward_context, fp16.scaler
        )
    kernels = {
        EAGER: step_kernels(trainer_step(copy.deepcopy(eager), images, labels)),
        COMPILED: step_kernels(trainer_step(compiled, images, labels)),
    }
    for name, called in kernels.items():
        print(f"conv kernels: {name} training step: {', '.join(called) or 'none recorded'}")
    notes = {
        "batch_size": batch,
        **{f"conv_kernels {name}": ", ".join(called) for name, called in kernels.items()},
        "device": device_name(device),
        "torch": torch.__version__,
        "compile_training_seconds": compile_s,
        **device_notes(device),
    }
    names = variant_names(device, bf16_in_rounds=device.type == "cuda" or bf16_native())
    variants = {name: variant(steps[name], settings, device) for name in names}
    if BF16 not in variants:
        torch.set_num_threads(settings.threads)
        notes["bf16_one_step_ms"] = once_ms(bf16_step)
        notes["eager_one_step_ms"] = once_ms(trainer_step(copy.deepcopy(eager), images, labels))
    ratios = [
        Ratio(f"VGG11-CIFAR training step speed-up, {name}", STEP, "ms", EAGER, name, speedup=True)
        for name in variants
        if name != EAGER
    ]
    return run_case("train_speed", variants, ratios, settings, report, notes)
