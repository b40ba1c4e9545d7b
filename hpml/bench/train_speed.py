"""Case ``train_speed``: what compiled training, channels_last and bf16 autocast buy per step.

Variants, each its own copy of one VGG11-CIFAR (same initial weights) with its own SGD optimiser,
trained on the same random batch of ``BATCH`` images:

- ``eager``: fp32, contiguous (NCHW) tensors, as ``python -m hpml.train`` runs by default;
- ``compiled``: the training step's net through ``hpml.optimize.compile.training`` (what
  ``compile.train=true`` runs), compiled and warmed up before the rounds (inductor cache under
  ``.bench/inductor_train``; seconds in the notes, never in a ratio);
- ``channels_last``: net and batch in NHWC, what ``model.channels_last=true`` does;
- ``bf16 autocast``: forward and loss under Lightning's ``bf16-mixed`` precision plugin on CPU
  (``torch.autocast("cpu", torch.bfloat16)``, weights and optimiser in fp32), what
  ``trainer=bf16`` runs.

Each variant, each round: ``warmup`` untimed steps, then the median wall time of ``steps`` steps
(forward, cross-entropy, backward, SGD update), and the samples per second it gives. Ratios are
eager / variant step time, so larger is better. Measured here (batch 16, one thread, load
average 1.1, 3 rounds): compiled 0.87x (0.84-0.88), channels_last 0.94x (0.89-0.96): on this
AVX2 CPU neither pays for training, unlike inference (``quant``: 1.23x with freezing, which a
training graph cannot use, its weights change every step).

A CPU without bf16 instructions (no AVX512-BF16 or AMX: the ``cpu_bf16_native`` note) runs bf16
convolutions through oneDNN's reference paths: on the 2-core AMD EPYC (AVX2) here one step took
8.1 s against 0.34 s in fp32 (about 24x slower, load average 1.1). There the bf16 variant is not
put in the rounds (it would take the case from a minute to a quarter of an hour); one step of it
is timed once, after a warm-up step, and reported in the notes beside an eager step timed alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from torch import nn

from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.models.nets.vgg import CifarVGG
from hpml.optimize.compile import DISPATCH_ONLY
from hpml.optimize.compile.training import compile_for_training

BATCH = 16
EAGER, COMPILED, CHANNELS_LAST, BF16 = "eager", "compiled", "channels_last", "bf16 autocast"
STEP, THROUGHPUT = "step_time_ms", "throughput_samples_per_s"


def speed_up(name: str) -> Ratio:
    return Ratio(f"VGG11-CIFAR training step speed-up, {name}", STEP, "ms", EAGER, name)


Context = Callable[[], AbstractContextManager]


def trainer_step(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, context: Context = nullcontext
) -> Callable[[], None]:
    """One optimiser step of ``net`` on the batch, forward and loss inside ``context``."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with context():
            loss = loss_fn(net(images), labels)
        loss.backward()
        optimizer.step()

    return step


def variant(step: Callable[[], None], settings: Settings) -> Callable[[], Measurement]:
    def measure() -> Measurement:
        torch.set_num_threads(settings.threads)
        for _ in range(settings.warmup):
            step()
        times = []
        for _ in range(settings.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        return {STEP: 1e3 * median, THROUGHPUT: BATCH / median}

    return measure


def once_ms(step: Callable[[], None]) -> float:
    """Milliseconds of one step after one untimed step."""
    step()
    start = time.perf_counter()
    step()
    return 1e3 * (time.perf_counter() - start)


def step_kernels(step: Callable[[], None]) -> tuple[str, ...]:
    """The convolution operators (forward and backward) one training step calls, as
    ``torch.profiler`` names them, after one untimed step."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = {event.key for event in prof.key_averages()}
    return tuple(sorted(n for n in names if "conv" in n and n not in DISPATCH_ONLY))


def copy_of(net: nn.Module) -> nn.Module:
    other = CifarVGG(11).train()
    other.load_state_dict(net.state_dict())
    return other


def bf16_native() -> bool:
    """Whether this CPU has bf16 instructions (x86 flags; False where /proc/cpuinfo is absent)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    from lightning.pytorch.plugins.precision import MixedPrecision

    torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    images = torch.randn(BATCH, 3, 32, 32)
    labels = torch.randint(0, 10, (BATCH,))
    eager = CifarVGG(11).train()

    compiled, compile_s = compile_for_training(
        copy_of(eager), [images], bench_dir / "inductor_train"
    )
    nhwc = copy_of(eager).to(memory_format=torch.channels_last)
    nhwc_images = images.contiguous(memory_format=torch.channels_last)
    bf16_step = trainer_step(
        copy_of(eager), images, labels, MixedPrecision("bf16-mixed", "cpu").forward_context
    )
    variants = {
        EAGER: variant(trainer_step(eager, images, labels), settings),
        COMPILED: variant(trainer_step(compiled, images, labels), settings),
        CHANNELS_LAST: variant(trainer_step(nhwc, nhwc_images, labels), settings),
    }
    kernels = {
        name: step_kernels(step)
        for name, step in (
            (EAGER, trainer_step(copy_of(eager), images, labels)),
            (COMPILED, trainer_step(compiled, images, labels)),
        )
    }
    for name, called in kernels.items():
        print(f"conv kernels: {name} training step: {', '.join(called) or 'none recorded'}")
    notes = {
        "batch_size": BATCH,
        **{f"conv_kernels {name}": ", ".join(called) for name, called in kernels.items()},
        "device": "cpu",
        "torch": torch.__version__,
        "compile_training_seconds": compile_s,
        "cpu_bf16_native": bf16_native(),
    }
    if bf16_native():
        variants[BF16] = variant(bf16_step, settings)
    else:
        torch.set_num_threads(settings.threads)
        notes["bf16_one_step_ms"] = once_ms(bf16_step)
        notes["eager_one_step_ms"] = once_ms(trainer_step(copy_of(eager), images, labels))
    ratios = [speed_up(name) for name in variants if name != EAGER]
    return run_case("train_speed", variants, ratios, settings, report, notes)
