"""Case ``activations``: what keeping fewer activation bytes costs a training step (study 4).

Copies of one VGG11-CIFAR train with autograd keeping what it saves (``keep``), every stage
recomputed in backward (``checkpoint``), or saved tensors stored as bfloat16 (``bf16``).
Ratios: step time variant / keep (the cost) and saved bytes keep / variant (the reduction);
no goals: the trade is the result.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from hpml.analysis.memory import SavedActivations
from hpml.analysis.timing import call_seconds
from hpml.bench.harness import CaseResult, Measurement, Ratio, Report, Settings, run_case
from hpml.bench.train_speed import CPU, trainer_step
from hpml.models.nets.vgg import vgg
from hpml.optimize.activations import Bf16SavedTensors, checkpointed, default_stages

BATCH = 32
STEP, SAVED = "step_ms", "activations_bytes"
KEEP, CHECKPOINT, BF16 = "keep", "checkpoint", "bf16"
RATIOS = (
    Ratio("step time cost, checkpoint", STEP, "ms", CHECKPOINT, KEEP),
    Ratio("step time cost, bf16", STEP, "ms", BF16, KEEP),
    Ratio("saved activations reduction, checkpoint", SAVED, "bytes", KEEP, CHECKPOINT),
    Ratio("saved activations reduction, bf16", SAVED, "bytes", KEEP, BF16),
)
Context = Callable[[nn.Module], contextlib.AbstractContextManager]
CONTEXTS: dict[str, Context] = {
    KEEP: lambda net: contextlib.nullcontext(),
    CHECKPOINT: lambda net: checkpointed(net, default_stages(net)),
    BF16: Bf16SavedTensors,
}


def trainer(
    net: nn.Module, context: Context, batch: tuple[torch.Tensor, torch.Tensor], settings: Settings
) -> Callable[[], Measurement]:
    """A variant: times its training steps (:func:`hpml.bench.train_speed.trainer_step`) and
    measures the bytes one forward pass under ``context`` saves for backward."""
    images, labels = batch
    step = trainer_step(net, images, labels, lambda: context(net))

    def measure() -> Measurement:
        torch.set_num_threads(settings.threads)
        with SavedActivations(net) as recording, context(net):
            nn.functional.cross_entropy(net(images), labels)
        seconds = call_seconds(step, settings.steps, CPU, settings.warmup)
        return {STEP: 1e3 * statistics.median(seconds), SAVED: float(recording.bytes)}

    return measure


def run(settings: Settings, bench_dir: Path, report: Report | None = None) -> CaseResult:
    torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    base = vgg(11).train()
    batch = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    variants = {
        name: trainer(copy.deepcopy(base), context, batch, settings)
        for name, context in CONTEXTS.items()
    }
    notes = {
        "batch_size": BATCH,
        "model": "vgg11 cifar layout, batch norm, SGD momentum 0.9",
        "stages": [str(s) for s in default_stages(base)],
        "device": "cpu",
        "torch": torch.__version__,
        "timing": "median ms of settings.steps training steps per round",
        "saved": "bytes autograd saved for backward in one step, each storage once, no params",
    }
    return run_case("activations", variants, RATIOS, settings, report, notes)
