"""Compile a model for inference: TorchScript, ``torch.compile``, ``torch.export`` or AOTInductor.

Plain PyTorch.

``compile_model(net, method, examples, workdir)`` returns a ``Compiled``: the module to run, the
seconds compiling took (kept apart from any throughput), the largest difference of its outputs
from eager on ``examples``, and for ``export`` the saved program's path.

- ``torchscript``: ``torch.jit.trace`` (checked on a second batch size), ``torch.jit.freeze``,
  ``torch.jit.optimize_for_inference``. Deprecated upstream, kept because study 1 measured it.
  Compile time covers tracing, freezing and the profiling calls the executor needs per shape.
- ``torch_compile``: ``torch.compile(mode=...)`` with a fresh dynamo state and the inductor and
  triton caches in ``workdir`` (one per run), so the time is a cold compile, not a cache hit.
  Compilation happens on the first call of each shape: those calls are the compile time.
  ``freezing=True`` (inductor's ``freezing``) treats the weights as constants: inductor folds
  them, pre-packs them for oneDNN on CPU and calls ``mkldnn::_convolution_pointwise`` (ReLU
  fused) instead of eager's ``aten::mkldnn_convolution``; the module must not be trained
  afterwards (later weight updates are not seen). Freezing applies only to a graph compiled
  with grad disabled while ``torch._inductor.config.freezing`` is set *at that moment*
  (``torch.compile(options={"freezing": True})`` does not reach it: checked on torch 2.14), and
  dynamo recompiles whenever the grad mode or the input's dispatch keys differ from the traced
  call's (an ``inference_mode`` trace called under ``no_grad`` recompiled, unfrozen, onto
  ``aten::mkldnn_convolution``: the 0.94x-1.38x spread of earlier benches). So the module
  returned is :class:`Inference`: every call, compiling ones included, runs under
  ``inference_mode`` with inductor's ``freezing`` patched in, one graph per shape, always the
  same path. ``channels_last=True`` converts the net's 4-d weights to NHWC (in place) and
  compiles a wrapper that converts 4-d inputs inside the graph, so callers keep feeding NCHW
  batches. VGG11-CIFAR, batch 32, one thread, CPU time: frozen 1.25x over eager with or without
  channels_last; unfrozen 0.95-1.1x (``hpml/bench/quant.py``).
  :func:`conv_kernels` names the convolution operators a module calls (one profiled forward),
  so a caller can say whether the pre-packed path applied.
- ``export``: ``torch.export.export`` with a dynamic batch dimension, saved with
  ``torch.export.save`` as ``workdir/model.pt2``; the program's module runs (no speed-up
  expected: it is the portable artifact for AOTInductor, ExecuTorch and other runtimes).
- ``aot_inductor``: the same exported program (dynamic batch) compiled ahead of time by inductor
  into a shared library (``torch._inductor.aoti_compile_and_package``, with inductor's
  ``freezing`` as chosen), packaged as ``workdir/model_aoti.pt2`` and loaded back
  (``aoti_load_package``): what a deployment without Python's dynamo would run. Compile time
  is the export plus the C++ build.

Every variant is checked against eager on the example inputs; a model the method cannot handle
raises ``IncompatibleError`` with one line naming the model, the method and the reason.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.errors import ConfigError, IncompatibleError

METHODS = ("torchscript", "torch_compile", "export", "aot_inductor")
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class Compiled:
    module: nn.Module
    method: str
    seconds: float
    max_abs_diff: float
    artifact: Path | None = None
    size_bytes: int | None = None  # of the saved program where it is not a state dict
    conv_kernels: tuple[str, ...] = ()  # the convolution operators the module calls


class ChannelsLast(nn.Module):
    """Runs ``net`` on its 4-d tensor inputs in NHWC; compiled, the conversion is in the graph."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net.to(memory_format=torch.channels_last)

    def forward(self, *args: Any) -> Any:
        return self.net(
            *(
                a.contiguous(memory_format=torch.channels_last)
                if isinstance(a, torch.Tensor) and a.dim() == 4
                else a
                for a in args
            )
        )


class Inference(nn.Module):
    """A ``torch.compile``'d module called the one way it was compiled: under ``inference_mode``
    with inductor's ``freezing`` as chosen, so a recompile (new shape, caller under ``no_grad``
    or with grad on) takes the same path as the first compile (module docstring)."""

    def __init__(self, compiled: nn.Module, freezing: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.freezing = freezing

    def forward(self, *args: Any) -> Any:
        from torch._inductor import config as inductor_config

        with torch.inference_mode(), inductor_config.patch(freezing=self.freezing):
            return self.compiled(*args)


FAST_CONV = "mkldnn::_convolution_pointwise"  # pre-packed oneDNN convolution, pointwise op fused
# these route a convolution to a kernel and run none themselves
DISPATCH_ONLY = frozenset(
    {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution"}
    | {"aten::thnn_conv2d"}
)


def conv_kernels(module: nn.Module, example: Any) -> tuple[str, ...]:
    """The convolution operators one forward of ``module`` on ``example`` calls, as
    ``torch.profiler`` names them (``aten::mkldnn_convolution``, ``mkldnn::_convolution_pointwise``,
    ``aten::_slow_conv2d_forward``, ``aten::cudnn_convolution``...); empty for a model without
    convolutions."""
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(*_args(example))
    names = {event.key for event in prof.key_averages()}
    return tuple(sorted(n for n in names if "conv" in n and n not in DISPATCH_ONLY))


def fast_path(kernels: Sequence[str]) -> bool:
    """Every convolution runs the pre-packed oneDNN kernel (no eager ``mkldnn_convolution``)."""
    return bool(kernels) and all(k.startswith(FAST_CONV) for k in kernels)


class Program(nn.Module):
    """An ``nn.Module`` face for a frozen TorchScript module or an exported program's module.

    Neither supports ``.train()``/``.eval()`` (a LightningModule calls both around each stage),
    so the program is held outside the module tree and only ``forward`` reaches it.
    """

    def __init__(self, program: Any, method: str) -> None:
        super().__init__()
        object.__setattr__(self, "program", program)
        self.method = method

    def forward(self, *args: Any) -> Any:
        return self.program(*args)

    def extra_repr(self) -> str:
        return f"method={self.method}"


def _args(example: Any) -> tuple[Any, ...]:
    return example if isinstance(example, tuple) else (example,)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def max_abs_diff(reference: Any, other: Any) -> float:
    """Largest absolute difference between two outputs (tensors or nested tuples of them)."""
    if isinstance(reference, torch.Tensor):
        if not isinstance(other, torch.Tensor) or other.shape != reference.shape:
            return float("inf")
        return float((reference.float() - other.float()).abs().max()) if reference.numel() else 0.0
    if isinstance(reference, list | tuple):
        if not isinstance(other, list | tuple) or len(other) != len(reference):
            return float("inf")
        return max((max_abs_diff(r, o) for r, o in zip(reference, other, strict=True)), default=0.0)
    return 0.0 if reference == other else float("inf")


def _sync(example: Any) -> None:
    tensor = _args(example)[0]
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)


def _untraceable(net: nn.Module, method: str, exc: BaseException) -> IncompatibleError:
    alternatives = ", ".join(f"compile={m}" for m in METHODS if m != method)
    return IncompatibleError(
        f"{method} cannot compile {type(net).__name__}: {_first_line(exc)} (try {alternatives})"
    )


def torchscript(net: nn.Module, examples: Sequence[Any]) -> tuple[nn.Module, float]:
    start = time.perf_counter()
    try:
        with torch.no_grad():
            traced = torch.jit.trace(
                net, _args(examples[0]), check_inputs=[_args(e) for e in examples[1:]] or None
            )
            module = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
            with torch.inference_mode():
                for example in examples:  # the profiling executor specialises on first calls
                    for _ in range(2):
                        module(*_args(example))
                    _sync(example)
    except Exception as exc:
        raise _untraceable(net, "torchscript", exc) from exc
    return module, time.perf_counter() - start


def use_cache_dir(cache: Path) -> Path:
    """Point inductor's and triton's on-disk caches at ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    return cache


def torch_compile(
    net: nn.Module,
    examples: Sequence[Any],
    workdir: Path,
    mode: str = "default",
    dynamic: bool | None = None,
    fullgraph: bool = False,
    freezing: bool = False,
    channels_last: bool = False,
    cache_dir: Path | None = None,
) -> tuple[nn.Module, float]:
    if mode not in MODES:
        raise ConfigError("mode", mode, f"one of {', '.join(MODES)}")
    use_cache_dir(cache_dir or workdir / "inductor_cache")
    torch._dynamo.reset()  # no graphs left from an earlier compile in this process
    start = time.perf_counter()
    compiled = torch.compile(
        ChannelsLast(net) if channels_last else net, mode=mode, dynamic=dynamic, fullgraph=fullgraph
    )
    module = Inference(compiled, freezing)
    try:
        for example in examples:
            module(*_args(example))
            _sync(example)
    except Exception as exc:
        raise _untraceable(net, "torch_compile", exc) from exc
    return module, time.perf_counter() - start


def _exported(net: nn.Module, examples: Sequence[Any], method: str) -> Any:
    """``net`` exported on the largest example, its batch dimension dynamic."""
    example = _args(examples[-1])
    dynamic = tuple(
        {0: torch.export.Dim.AUTO} if isinstance(a, torch.Tensor) else None for a in example
    )
    try:
        return torch.export.export(net, example, dynamic_shapes=dynamic)
    except Exception as exc:
        raise _untraceable(net, method, exc) from exc


def export(net: nn.Module, examples: Sequence[Any], workdir: Path) -> tuple[nn.Module, float, Path]:
    start = time.perf_counter()
    program = _exported(net, examples, "export")
    seconds = time.perf_counter() - start
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.pt2"
    torch.export.save(program, path)
    return program.module(), seconds, path


def aot_inductor(
    net: nn.Module,
    examples: Sequence[Any],
    workdir: Path,
    freezing: bool = False,
    cache_dir: Path | None = None,
) -> tuple[Any, float, Path]:
    from torch._inductor import aoti_compile_and_package, aoti_load_package

    use_cache_dir(cache_dir or workdir / "inductor_cache")
    start = time.perf_counter()
    with torch.no_grad():
        program = _exported(net, examples, "aot_inductor")
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            path = aoti_compile_and_package(
                program,
                package_path=str(workdir / "model_aoti.pt2"),
                inductor_configs={"freezing": freezing},
            )
            runner = aoti_load_package(path)
            for example in examples:
                runner(*_args(example))
                _sync(example)
        except Exception as exc:
            raise _untraceable(net, "aot_inductor", exc) from exc
    return runner, time.perf_counter() - start, Path(path)


def compile_model(
    net: nn.Module,
    method: str,
    examples: Sequence[Any],
    workdir: Path,
    mode: str = "default",
    dynamic: bool | None = None,
    fullgraph: bool = False,
    tolerance: float = 1e-3,
    freezing: bool = False,
    channels_last: bool = False,
    cache_dir: Path | None = None,
) -> Compiled:
    """Compile eval-mode ``net`` by ``method``; ``examples`` are inputs of each batch size to
    serve (compiled for, and checked against eager within ``tolerance``, relative to the
    largest eager output)."""
    if method not in METHODS:
        raise ConfigError("method", method, f"one of {', '.join(METHODS)}")
    if not examples:
        raise ValueError("compile_model needs at least one example input")
    net.eval()
    with torch.inference_mode():
        expected = [net(*_args(e)) for e in examples]
    artifact = None
    if method == "torchscript":
        module, seconds = torchscript(net, examples)
    elif method == "torch_compile":
        module, seconds = torch_compile(
            net, examples, workdir, mode, dynamic, fullgraph, freezing, channels_last, cache_dir
        )
    elif method == "aot_inductor":
        module, seconds, artifact = aot_inductor(net, examples, workdir, freezing, cache_dir)
    else:
        module, seconds, artifact = export(net, examples, workdir)
    if method != "torch_compile":
        module = Program(module, method)
    kernels = conv_kernels(module, examples[-1])
    with torch.inference_mode():
        diff = max(
            max_abs_diff(want, module(*_args(e)))
            for want, e in zip(expected, examples, strict=True)
        )
    scale = max(
        max_abs_diff(torch.zeros_like(w), w) if isinstance(w, torch.Tensor) else 1.0
        for w in expected
    )
    if not diff <= tolerance * max(scale, 1.0):
        raise IncompatibleError(
            f"{method} output of {type(net).__name__} differs from eager by {diff:.3g} "
            f"(tolerance {tolerance:g} x {max(scale, 1.0):.3g}): the model is not traceable as is"
        )
    size = None
    if method == "torchscript":
        with tempfile.TemporaryDirectory() as tmp:
            torch.jit.save(module.program, Path(tmp) / "model.ts")
            size = (Path(tmp) / "model.ts").stat().st_size
    elif artifact is not None:
        size = artifact.stat().st_size
    return Compiled(module, method, seconds, diff, artifact, size, kernels)
