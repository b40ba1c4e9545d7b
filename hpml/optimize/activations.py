"""Activation memory (study 4, ECHO/Gist): recompute stages, or store saved activations in bf16.

Plain PyTorch: :func:`checkpointed` recomputes chosen stages in backward (autograd keeps only
each stage's input); :class:`Bf16SavedTensors` stores float32 tensors saved for backward as
bfloat16 (a lossy, Gist-like encoding). Stages are named relative to the module given;
``name[a:b]`` is children ``a`` to ``b - 1`` of the Sequential ``name``.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hpml.errors import ConfigError

POOLING = (  # every MaxPool, AvgPool and adaptive pool, of any dimension
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
    nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.pooling._AdaptiveMaxPoolNd,
)
_SLICE = re.compile(r"^(?P<name>[\w.]*)\[(?P<start>\d+):(?P<stop>\d+)\]$")


@dataclass(frozen=True)
class Stage:
    """A submodule ``name``, or children ``[start, stop)`` of the Sequential ``name``."""

    name: str
    start: int | None = None
    stop: int | None = None

    def __str__(self) -> str:
        return self.name if self.start is None else f"{self.name}[{self.start}:{self.stop}]"

    @classmethod
    def parse(cls, text: str) -> Stage:
        match = _SLICE.match(text)
        if match is None:
            return cls(text)
        return cls(match["name"], int(match["start"]), int(match["stop"]))


def _has_params(modules: Sequence[nn.Module]) -> bool:
    return any(True for m in modules for _ in m.parameters())


def _sequential_stages(name: str, seq: nn.Sequential) -> list[Stage]:
    """The runs of ``seq`` that end at a pooling layer (pool included: its input is then no longer
    saved) and the run after the last one; runs without parameters are left alone."""
    children, stages, start = list(seq), [], 0
    for index, child in enumerate(children):
        if isinstance(child, POOLING) or index == len(children) - 1:
            if _has_params(children[start : index + 1]):
                whole = start == 0 and index == len(children) - 1
                stages.append(Stage(name) if whole else Stage(name, start, index + 1))
            start = index + 1
    return stages


def default_stages(model: nn.Module) -> list[Stage]:
    """Whole stages: each outermost Sequential below ``model`` cut after its pooling layers (VGG
    blocks, ResNet's ``layer1``..``layer4``); a net with none (LSTM, VAE) gets its parameterised
    top-level layers."""

    def walk(prefix: str, module: nn.Module) -> list[Stage]:
        found: list[Stage] = []
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if isinstance(child, nn.Sequential):
                found += _sequential_stages(full, child)
            elif next(child.children(), None) is not None:
                found += walk(f"{full}.", child)
        return found

    stages = walk("", model)
    if stages:
        return stages
    prefix, top = "", model
    while len(holders := [(n, c) for n, c in top.named_children() if _has_params([c])]) == 1:
        name, top = holders[0]
        prefix += f"{name}."
    return [Stage(f"{prefix}{n}") for n, c in top.named_children() if _has_params([c])]


def resolve(model: nn.Module, modules: Sequence[str] | None) -> list[Stage]:
    """The stages ``modules`` names in ``model`` (``None``: :func:`default_stages`); an unknown
    name or a bad slice raises a one-line :class:`ConfigError` naming what would be valid."""
    if modules is None:
        return default_stages(model)
    named = dict(model.named_modules())
    stages = []
    for text in modules:
        stage = Stage.parse(str(text))
        module = named.get(stage.name) if stage.name else None
        if module is None:
            valid = ", ".join(str(s) for s in default_stages(model)) or "none"
            raise ConfigError("modules", text, f"submodule names of the model (stages: {valid})")
        if stage.start is not None:
            size = len(module) if isinstance(module, nn.Sequential) else 0
            if not 0 <= stage.start < stage.stop <= size:  # type: ignore[operator]
                raise ConfigError(
                    "modules", text, f"a slice [a:b] with 0 <= a < b <= {size} of a Sequential"
                )
        stages.append(stage)
    return stages


class _RecomputeKeepsStats:
    """Recomputation without a second update of BatchNorm running statistics: momentum 0 leaves
    them as they are (exactly), and ``num_batches_tracked`` is put back."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.norms = [
            m
            for root in modules
            for m in root.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        ]
        self.state: list[tuple[float | None, torch.Tensor | None]] = []

    def __enter__(self) -> None:
        self.state = []
        for norm in self.norms:
            tracked = norm.num_batches_tracked
            self.state.append((norm.momentum, None if tracked is None else tracked.clone()))
            norm.momentum = 0.0

    def __exit__(self, *exc: object) -> None:
        for norm, (momentum, tracked) in zip(self.norms, self.state, strict=True):
            norm.momentum = momentum
            if tracked is not None:
                norm.num_batches_tracked.copy_(tracked)


def _checkpointing(function: Any, modules: Sequence[nn.Module]) -> Any:
    """``function`` under checkpoint when autograd records (eval and no_grad run it plainly)."""

    def contexts() -> tuple[Any, Any]:
        return ExitStack(), _RecomputeKeepsStats(modules)

    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return function(*args, **kwargs)
        return checkpoint(function, *args, use_reentrant=False, context_fn=contexts, **kwargs)

    return run


def _run_all(modules: Sequence[nn.Module], x: Any) -> Any:
    for module in modules:
        x = module(x)
    return x


def _segmented(seq: nn.Sequential, spans: list[tuple[int, int]]) -> Any:
    """A forward for ``seq`` that runs each ``[start, stop)`` of ``spans`` under checkpoint."""

    def forward(x: Any) -> Any:
        children, index = list(seq), 0
        for start, stop in sorted(spans):
            x = _run_all(children[index:start], x)
            part = children[start:stop]
            x = _checkpointing(lambda y, part=part: _run_all(part, y), part)(x)
            index = stop
        return _run_all(children[index:], x)

    return forward


@contextmanager
def checkpointed(model: nn.Module, stages: Sequence[Stage]) -> Iterator[None]:
    """Within the block, every stage's forward runs under ``torch.utils.checkpoint``: instance
    ``forward`` patched in place (state-dict keys and hooks unchanged), put back on exit."""
    named = dict(model.named_modules())
    spans: dict[str, list[tuple[int, int]]] = {}
    wholes = []
    for stage in stages:
        if stage.start is None:
            wholes.append(named[stage.name])
        else:
            spans.setdefault(stage.name, []).append((stage.start, stage.stop))  # type: ignore[arg-type]
    patched = []
    try:
        for module in wholes:
            module.forward = _checkpointing(module.forward, [module])
            patched.append(module)
        for name, ranges in spans.items():
            seq = named[name]
            seq.forward = _segmented(seq, ranges)
            patched.append(seq)
        yield
    finally:
        for module in patched:
            del module.forward


class Bf16SavedTensors:
    """Context manager: float32 tensors autograd saves for backward are stored as bfloat16 and
    cast back when backward unpacks them.

    Parameters and other dtypes pass untouched; a tensor saved by several ops is encoded once.
    Hooks already in force (a measurement of saved bytes) see the encoded tensors: torch runs
    only the innermost pair, so this one calls the enclosing pair itself.
    """

    def __init__(self, model: nn.Module) -> None:
        self.exclude = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.encoded: dict[tuple, torch.Tensor] = {}
        self.outer: tuple[Any, Any] | None = None
        self._hooks: Any = None

    def _encode(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dtype != torch.float32 or tensor.untyped_storage().data_ptr() in self.exclude:
            return tensor
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor._version)
        if key not in self.encoded:
            self.encoded[key] = tensor.detach().to(torch.bfloat16)
            # the key stays valid while the tensor lives: its address cannot be reused
            weakref.finalize(tensor, self.encoded.pop, key, None)
        return self.encoded[key]

    def _pack(self, tensor: torch.Tensor) -> tuple[torch.dtype, Any, Any]:
        encoded = self._encode(tensor)
        if self.outer is None:
            return tensor.dtype, None, encoded
        return tensor.dtype, self.outer[1], self.outer[0](encoded)

    @staticmethod
    def _unpack(saved: tuple[torch.dtype, Any, Any]) -> torch.Tensor:
        dtype, outer_unpack, packed = saved
        tensor = packed if outer_unpack is None else outer_unpack(packed)
        return tensor.to(dtype)

    def __enter__(self) -> Bf16SavedTensors:
        self.outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        self.encoded.clear()
        self.outer = None
