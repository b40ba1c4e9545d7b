"""Case ``fuse``: what a fused training array (``fuse=array``, HFTA) buys over serial training.

For N = 2, 4, 8, 16 members of one model (the study-3 VAE and VGG11-CIFAR with batch norm), two
variants train fresh copies on one shared batch, as an lr sweep's members read the same data:
``fused``, :class:`hpml.fused.array.FusedArray`'s ``training_step`` under a barebones
``Trainer``, and ``serial``, each member's ``training_step``, backward and optimiser step in
turn. The ratio is fused / serial samples/s per (model, N); goal: the VAE at N = 8 reaches
HFTA's lower bound on a GPU. The notes count the ops one fused step launches at each N
(:func:`step_ops`): what does not grow with N is the engine's, what does the members' metrics.
CPU figures are in docs/fused-arrays.md.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import lightning as L
import torch
from torch import Tensor

from hpml.analysis.devices import default_device, device_name
from hpml.analysis.timing import call_seconds
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.data.spec import DataSpec
from hpml.fused.array import FusedArray
from hpml.models.base import HpmlModule
from hpml.models.classifier import ImageClassifier
from hpml.models.nets.vae import VAE
from hpml.models.nets.vgg import vgg
from hpml.models.vae import VAEModule

SIZES = (2, 4, 8, 16)
# on a GPU, the VAE's curve as HFTA draws it: up to 64 members, where small models still leave
# the device room (N=1: what the fused machinery costs a lone model)
GPU_VAE_SIZES = (1, 2, 4, 8, 16, 32, 64)
FUSED, SERIAL = "fused", "serial"
SAMPLES, STEP, FIRST_LOSS = "samples_per_s", "step_ms", "first_step_loss"
GOAL_VAE_N8 = 2.4  # HFTA's lower bound for fused arrays on a GPU
SEED = 0


@dataclass(frozen=True)
class Family:
    """A model of the case: how member ``i`` is built, and the batch every member sees."""

    name: str
    batch_size: int
    member: Callable[[int], HpmlModule]
    batch: Callable[[int], tuple[Tensor, Tensor]]


MNIST = DataSpec("image", (1, 28, 28), 10, value_range=(0.0, 1.0))
CIFAR = DataSpec("image", (3, 32, 32), 10)


def vae(batch_size: int = 128) -> Family:
    def member(index: int) -> HpmlModule:  # of an Adam lr sweep: 1e-4 x 1.25^index
        optimizer = partial(torch.optim.Adam, lr=1e-4 * 1.25**index)
        return VAEModule(partial(VAE, hidden=400, latent=20), MNIST, optimizer)

    def batch(size: int) -> tuple[Tensor, Tensor]:  # pixels in [0, 1]; the VAE ignores labels
        return torch.rand(size, 1, 28, 28), torch.zeros(size, dtype=torch.long)

    return Family("VAE", batch_size, member, batch)


def vgg11(batch_size: int) -> Family:
    def member(index: int) -> HpmlModule:  # of an SGD lr sweep: 0.01 x 1.15^index
        optimizer = partial(torch.optim.SGD, lr=0.01 * 1.15**index, momentum=0.9, weight_decay=5e-4)
        net = partial(vgg, depth=11, layout="cifar", batch_norm=True)
        return ImageClassifier(net, CIFAR, optimizer)

    def batch(size: int) -> tuple[Tensor, Tensor]:
        return torch.randn(size, 3, 32, 32), torch.randint(0, 10, (size,))

    return Family("VGG11-CIFAR", batch_size, member, batch)


def pristine(family: Family, count: int) -> list[HpmlModule]:
    """Members 0 to ``count - 1``, member i built after seeding ``SEED + i`` as its job would
    be; variants train copies, so every round starts from the same weights."""
    built = []
    for index in range(count):
        torch.manual_seed(SEED + index)
        built.append(family.member(index))
    return built


@contextlib.contextmanager
def quiet_barebones() -> Iterator[None]:
    """Without the barebones Trainer's banner, its device lines and its warning per ``log``:
    quiets the logger Lightning's rank-zero lines go through now, whose name changes once
    ``mlflow.pytorch`` imports the standalone ``pytorch_lightning``."""
    from lightning.fabric.utilities.rank_zero import rank_zero_module

    logger = rank_zero_module.log
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"You are trying to `self.log\(\)` but")
            yield
    finally:
        logger.setLevel(level)


def attached(module: L.LightningModule, device: torch.device) -> L.LightningModule:
    """``module`` on ``device`` with its optimisers under a barebones ``Trainer``, so that
    ``manual_backward`` and ``optimizers()`` work as under ``fit``."""
    trainer = L.Trainer(barebones=True, accelerator=device.type, devices=1, logger=False)
    module.to(device)
    trainer.strategy.connect(module)
    module.trainer = trainer
    trainer.strategy.setup_optimizers(trainer)
    return module


def serial_step(member: HpmlModule, batch: tuple[Tensor, Tensor]) -> Tensor:
    """One step of ``member``'s own job: its ``training_step``, Lightning's backward, its step."""
    optimizer = member.optimizers()
    loss = member.training_step(batch, 0)
    optimizer.zero_grad(set_to_none=True)
    member.trainer.strategy.backward(loss, optimizer)
    optimizer.step()
    return loss.detach()


def measure(
    family: Family,
    members: Sequence[HpmlModule],
    mode: str,
    steps: int,
    warmup: int,
    device: torch.device,
    threads: int | None = None,
) -> Measurement:
    """One variant (``fused`` or ``serial``) training copies of ``members``: its throughput, its
    median step (serially, the sum of the members' medians) and the summed loss of the first
    step, a warm-up step whose noise (the VAE's sampling) both variants draw from one seed.

    Args:
        members: the pristine members, copied before training.
        warmup: untimed steps before the timed ones, the first step among them.
        threads: torch's intra-op threads where given (another case may have changed them).
    """
    if threads is not None:
        torch.set_num_threads(threads)
    size = len(members)
    torch.manual_seed(SEED + 1000)
    batch = tuple(t.to(device) for t in family.batch(family.batch_size))
    copies = [copy.deepcopy(member) for member in members]
    with quiet_barebones():
        array = None
        if mode == FUSED:
            array = attached(FusedArray(copies), device)
            jobs = [partial(array.training_step, batch, 0)]
        elif mode == SERIAL:
            jobs = [partial(serial_step, attached(member, device), batch) for member in copies]
        else:
            raise ValueError(f"mode must be {FUSED} or {SERIAL}, got {mode!r}")
        torch.manual_seed(SEED + 2000)  # serial members' first steps in turn: the array's draws
        first = sum(float(job()) for job in jobs)
        step_ms = 0.0
        for job in jobs:  # serially one job after another, each warmed up and timed
            step_ms += 1e3 * statistics.median(call_seconds(job, steps, device, warmup - 1))
        if array is not None and array.frozen:
            raise RuntimeError(f"members {sorted(array.frozen)} of the array diverged")
    return {SAMPLES: 1e3 * size * family.batch_size / step_ms, STEP: step_ms, FIRST_LOSS: first}


def launched_ops(call: Callable[[], object]) -> Counter[str]:
    """The aten ops one ``call`` launches, by name, from torch's profiler: the innermost ones
    (a composite op's work is its children's), less views and allocations, which launch no
    kernel."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    inner = [e for e in events if not any(c.name.startswith("aten::") for c in e.cpu_children)]
    return Counter(e.name for e in inner if not launches_nothing(e.name))


def launches_nothing(name: str) -> bool:
    """Whether aten op ``name`` is a view (by its schema) or an allocation."""
    op = name.removeprefix("aten::")
    if op.startswith("empty"):
        return True
    packet = getattr(torch.ops.aten, op, None)
    return packet is not None and any(getattr(packet, o).is_view for o in packet.overloads())


def step_ops(family: Family, members: Sequence[HpmlModule], device: torch.device) -> int:
    """Ops one training step of a fused array of copies of ``members`` launches, after two
    untimed steps (:func:`launched_ops`)."""
    torch.manual_seed(SEED + 1000)
    batch = tuple(t.to(device) for t in family.batch(family.batch_size))
    with quiet_barebones():
        array = attached(FusedArray([copy.deepcopy(member) for member in members]), device)
        for _ in range(2):
            array.training_step(batch, 0)
        return sum(launched_ops(partial(array.training_step, batch, 0)).values())


def variant_name(family: Family, size: int, mode: str) -> str:
    return f"{family.name} N={size} {mode}"


def schedule(
    family: Family, size: int, settings: Settings, device: torch.device
) -> tuple[int, int]:
    """Timed and warm-up steps: the settings', but on CPU the VGG (full steps at every size
    would take minutes a round) warms up one step and times ``steps // size``."""
    if device.type == "cuda" or family.name == "VAE":
        return settings.steps, max(settings.warmup, 1)
    return max(1, settings.steps // size), 1


def ratio(family: Family, size: int, steps: int, on_gpu: bool) -> Ratio:
    """Fused / serial samples/s of ``size`` members; a goal for the VAE at N = 8 on a GPU only."""
    timed = f"{steps} timed step{'' if steps == 1 else 's'}"
    label = f"{family.name} N={size} samples/s (batch {family.batch_size}, {timed})"
    goal = GOAL_VAE_N8 if family.name == "VAE" and size == 8 else None
    if goal is not None and not on_gpu:
        label, goal = f"{label}, goal >= {goal:g} on GPU only", None
    fused, serial = variant_name(family, size, FUSED), variant_name(family, size, SERIAL)
    return Ratio(label, SAMPLES, "samples/s", fused, serial, goal)


def array_sizes(family: Family, device: torch.device) -> tuple[int, ...]:
    """The array sizes ``family`` is timed at on ``device``: the VAE's whole curve on a GPU."""
    return GPU_VAE_SIZES if device.type == "cuda" and family.name == "VAE" else SIZES


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    torch.set_num_threads(settings.threads)
    device = default_device()
    on_gpu = device.type == "cuda"
    families = (vae(), vgg11(32 if on_gpu else 4))
    variants: dict[str, Callable[[], Measurement]] = {}
    ratios, timed, ops = [], {}, {}
    for family in families:
        sizes = array_sizes(family, device)
        built = pristine(family, max(sizes))
        for size in sizes:
            steps, warmup = schedule(family, size, settings, device)
            timed[f"{family.name} N={size}"] = {"timed_steps": steps, "warmup_steps": warmup}
            ops[f"{family.name} N={size}"] = step_ops(family, built[:size], device)
            for mode in (FUSED, SERIAL):
                variants[variant_name(family, size, mode)] = partial(
                    measure, family, built[:size], mode, steps, warmup, device, settings.threads
                )
            ratios.append(ratio(family, size, steps, on_gpu))
    notes = {
        "device": device_name(device),
        "torch": torch.__version__,
        "batch_size": {family.name: family.batch_size for family in families},
        "steps_per_variant_and_round": timed,
        "fused_step_ops": ops,
        "ops": "aten ops one fused training step launches (innermost, less views and "
        "allocations; torch.profiler), after two untimed steps",
        "fused": "FusedArray.training_step (barebones Trainer attached), one shared batch",
        "serial": "each member's training_step, Lightning's backward and its optimiser step, "
        "member after member; its step time is the sum of the members' median steps",
        "goal": f"VAE N=8 fused/serial >= {GOAL_VAE_N8:g} on a GPU (HFTA's lower bound)"
        + ("" if on_gpu else "; not applicable on CPU (docs/fused-arrays.md)"),
    }
    # each (model, N)'s fused and serial variants run back to back in every round
    return run_case("fuse", variants, ratios, settings, report, notes, group=2)
