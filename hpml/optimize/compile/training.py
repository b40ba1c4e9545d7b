"""Compile a module for training, with the compile paid before any timed step. Plain PyTorch.

The compiled module shares the net's parameters; the eager ``net`` stays what a caller keeps (no
``_orig_mod.`` keys; measuring it compiles nothing more).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
from torch import nn

from hpml.analysis.compare import PLAN, Plan, Speedup, speedup, time_side_by_side
from hpml.errors import one_of
from hpml.optimize.compile.base import sync, untraceable, use_cache_dir
from hpml.optimize.compile.torch_compile import MODES
from hpml.tensors import as_args, tensors_in

Context = Callable[[], AbstractContextManager]


def compile_for_training(
    net: nn.Module,
    examples: Sequence[torch.Tensor],
    workdir: Path,
    mode: str = "default",
    dynamic: bool | None = None,
    fullgraph: bool = False,
    context: Context = nullcontext,
    cache_dir: Path | None = None,
) -> tuple[nn.Module, float]:
    """``net`` compiled and warmed up (forward and backward, :func:`untouched`) on ``examples``
    (one per batch size the training meets) inside ``context`` (the trainer's autocast), and the
    seconds that took."""
    one_of("mode", mode, MODES)
    use_cache_dir(cache_dir or workdir / "inductor_cache")
    torch._dynamo.reset()
    start = time.perf_counter()
    compiled = torch.compile(net, mode=mode, dynamic=dynamic, fullgraph=fullgraph)
    try:
        with untouched(net, examples):
            for example in examples:
                _train_step(compiled, example, context)
                sync(example)
    except Exception as exc:
        raise untraceable(net, "torch_compile", exc) from exc
    return compiled, time.perf_counter() - start


@contextmanager
def untouched(net: nn.Module, examples: Sequence[torch.Tensor]) -> Iterator[None]:
    """Steps inside the block leave no trace on ``net`` or the run: train mode and grad on
    inside; after, gradients cleared, buffers (BatchNorm's statistics) restored, the random
    streams as they were, the train/eval mode as it was."""
    was_training = net.training
    buffers = [(b, b.detach().clone()) for b in net.buffers()]
    devices = [e.device for e in examples if isinstance(e, torch.Tensor) and e.is_cuda][:1]
    net.train()
    try:
        with torch.random.fork_rng(devices), torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        net.zero_grad(set_to_none=True)
        with torch.no_grad():
            for buffer, value in buffers:
                buffer.copy_(value)
        net.train(was_training)


def _train_step(net: nn.Module, example: torch.Tensor, context: Context) -> None:
    """Forward (inside ``context``) and backward of a scalar that depends on every floating
    output, so the backward covers the whole graph."""
    with context():
        output = net(*as_args(example))
    floats = [t.float().sum() for t in tensors_in(output) if t.is_floating_point()]
    torch.stack(floats).sum().backward()


def training_speedup(
    eager: nn.Module,
    compiled: nn.Module,
    example: torch.Tensor,
    context: Context = nullcontext,
    plan: Plan = PLAN,
) -> Speedup:
    """Eager / compiled time of one training step's forward and backward on ``example``, timed
    side by side as ``plan`` asks; ``eager`` is left as it was."""
    calls = {
        side: functools.partial(_train_step, net, example, context)
        for side, net in (("eager", eager), ("compiled", compiled))
    }
    with untouched(eager, [example]):
        timings = time_side_by_side(calls, plan, [str(example.device)])
    return speedup(timings["eager"].rounds_ms, timings["compiled"].rounds_ms)
