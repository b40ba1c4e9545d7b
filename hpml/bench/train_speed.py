"""Case ``train_speed``: what compiled training, channels_last and mixed precision buy per step.

Each variant trains its own copy of one net on the same random batch, device-resident, on
:func:`hpml.analysis.devices.default_device`, as hpml runs it: ``eager``; ``compiled``
(``compile.train=true``); ``channels_last``; ``bf16 autocast`` (``trainer=bf16``); on a GPU
``fp16 autocast`` with its ``GradScaler``. :func:`configurations` says which nets and variants
run on which device (:mod:`hpml.bench.workloads`): the CPU times VGG11-CIFAR; a GPU times it too,
launch-bound, with ``CUDA graphs`` (``compile.mode=reduce-overhead``) beside eager, and VGG16 in
its ImageNet layout at 224 px, batch 64, bound by arithmetic. Ratios are eager / variant step
time per net (figures: docs/metrics.md, docs/gpu.md). A CPU without bf16 instructions runs bf16
convolutions through slow reference paths, so there one bf16 step is timed once, beside an eager
step, in the notes.
"""

from __future__ import annotations

import copy
import itertools
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from hpml.analysis.devices import default_device, device_name
from hpml.analysis.timing import call_seconds, synchronized_now
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.bench.workloads import VGG16_IMAGENET, Workload, vgg11_cifar
from hpml.optimize.compile import DISPATCH_ONLY
from hpml.optimize.compile.training import compile_for_training

BATCH = 16  # on the CPU
CUDA_BATCH = 128  # VGG11-CIFAR on a GPU: batch 16 would time kernel launches alone
EAGER, COMPILED, CHANNELS_LAST = "eager", "compiled", "channels_last"
CUDA_GRAPHS = "CUDA graphs"  # torch.compile(mode="reduce-overhead"): forward and backward replayed
BF16, FP16 = "bf16 autocast", "fp16 autocast"
STEP, THROUGHPUT = "step_time_ms", "throughput_samples_per_s"
CPU = torch.device("cpu")


@dataclass(frozen=True)
class Config:
    """A net at one size, and the variants timed on it (eager first)."""

    workload: Workload
    variants: tuple[str, ...]

    def name(self, variant: str) -> str:
        """The variant's name in the case: ``VGG11-CIFAR 32px b128 CUDA graphs``."""
        return f"{self.workload.label} {variant}"


def configurations(device: torch.device, bf16_in_rounds: bool) -> list[Config]:
    """What runs on ``device``. The CPU: VGG11-CIFAR at batch 16, eager, compiled,
    channels_last and (``bf16_in_rounds``: the CPU has bf16 instructions) bf16. A GPU: VGG11-CIFAR
    at batch 128 with CUDA graphs too (its step is launch-bound: what replaying it saves), and
    VGG16-ImageNet at 224 px, batch 64 (the device's work), each with bf16 and fp16 autocast."""
    if device.type != "cuda":
        bf16 = (BF16,) if bf16_in_rounds else ()
        return [Config(vgg11_cifar(BATCH), (EAGER, COMPILED, CHANNELS_LAST, *bf16))]
    mixed = (CHANNELS_LAST, BF16, FP16)
    return [
        Config(vgg11_cifar(CUDA_BATCH), (EAGER, COMPILED, CUDA_GRAPHS, *mixed)),
        Config(VGG16_IMAGENET, (EAGER, COMPILED, *mixed)),
    ]


def trainer_step(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    context: Callable[[], AbstractContextManager] = nullcontext,
    scaler: torch.amp.GradScaler | None = None,
    graphed: bool = False,
) -> Callable[[], None]:
    """One optimiser step of ``net`` on the batch (SGD with momentum, cross-entropy).

    Args:
        context: made afresh around forward and loss each step (autocast).
        scaler: where given, the gradient scaling Lightning's ``16-mixed`` plugin does.
        graphed: ``net`` replays CUDA graphs: each step begins a new one, so the last step's
            outputs may be overwritten.
    """
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        if graphed:
            torch.compiler.cudagraph_mark_step_begin()
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
    step: Callable[[], None], settings: Settings, device: torch.device = CPU, batch: int = BATCH
) -> Callable[[], Measurement]:
    def measure() -> Measurement:
        torch.set_num_threads(settings.threads)
        for _ in range(settings.warmup):
            step()
        median = statistics.median(step_seconds(step, settings.steps, device))
        return {STEP: 1e3 * median, THROUGHPUT: batch / median}

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


def config_steps(
    config: Config, device: torch.device, bench_dir: Path
) -> tuple[dict[str, Callable[[], None]], dict[str, object]]:
    """Each variant's training step of ``config``, on its own copy of one net, and the notes:
    compile times, and the convolutions eager and compiled steps call."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    workload = config.workload
    torch.manual_seed(0)
    images, labels = workload.images().to(device), workload.labels().to(device)
    eager = workload.net().to(device).train()
    notes: dict[str, object] = {}
    steps: dict[str, Callable[[], None]] = {}
    for name in config.variants:
        net = eager if name == EAGER else copy.deepcopy(eager)
        if name in (COMPILED, CUDA_GRAPHS):
            mode = "reduce-overhead" if name == CUDA_GRAPHS else "default"
            net, notes[config.name(f"{name} compile_s")] = compile_for_training(
                net, [images], bench_dir / f"inductor_train_{mode}", mode=mode
            )
            steps[name] = trainer_step(net, images, labels, graphed=name == CUDA_GRAPHS)
        elif name == CHANNELS_LAST:
            nhwc = images.contiguous(memory_format=torch.channels_last)
            steps[name] = trainer_step(net.to(memory_format=torch.channels_last), nhwc, labels)
        elif name in (BF16, FP16):
            plugin = MixedPrecision("bf16-mixed" if name == BF16 else "16-mixed", device.type)
            steps[name] = trainer_step(net, images, labels, plugin.forward_context, plugin.scaler)
        else:
            steps[name] = trainer_step(net, images, labels)
    for name in (EAGER, COMPILED):  # eager on a copy: the variant's net starts untrained
        called = step_kernels(
            steps[name] if name == COMPILED else trainer_step(copy.deepcopy(eager), images, labels)
        )
        print(f"conv kernels: {config.name(name)} training step: {', '.join(called) or 'none'}")
        notes[config.name(f"{name} conv_kernels")] = ", ".join(called)
    if BF16 not in config.variants:  # a CPU without bf16 instructions: one step of each, once
        bf16 = MixedPrecision("bf16-mixed", device.type).forward_context
        notes["bf16_one_step_ms"] = once_ms(
            trainer_step(copy.deepcopy(eager), images, labels, bf16)
        )
        notes["eager_one_step_ms"] = once_ms(trainer_step(copy.deepcopy(eager), images, labels))
    return steps, notes


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    device = default_device()
    torch.set_num_threads(settings.threads)
    configs = configurations(device, bf16_in_rounds=device.type == "cuda" or bf16_native())
    notes: dict[str, object] = {
        "device": device_name(device),
        "torch": torch.__version__,
        "batch_size": {config.workload.label: config.workload.batch for config in configs},
        **device_notes(device),
    }
    variants: dict[str, Callable[[], Measurement]] = {}
    ratios: list[Ratio] = []
    compiled: list[Callable[[], None]] = []
    for config in configs:
        steps, config_notes = config_steps(config, device, bench_dir)
        notes.update(config_notes)
        for name, step in steps.items():
            variants[config.name(name)] = variant(step, settings, device, config.workload.batch)
        metric = f"{config.workload.label} training step speed-up"
        eager = config.name(EAGER)
        ratios += [
            Ratio(f"{metric}, {name}", STEP, "ms", eager, config.name(name), speedup=True)
            for name in config.variants
            if name != EAGER
        ]
        compiled += [steps[name] for name in (COMPILED, CUDA_GRAPHS) if name in steps]
    for step in compiled:  # each compile resets dynamo: the earlier ones compile again, now
        step()
    if device.type == "cuda":
        from torch._dynamo.utils import counters

        notes["cudagraph_skips"] = int(counters["inductor"]["cudagraph_skips"])
    return run_case("train_speed", variants, ratios, settings, report, notes)
