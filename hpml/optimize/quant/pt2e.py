"""Backend ``pt2e``: static int8 of a whole traced graph (torchao's PT2E flow, x86 CPU kernels).

Eager mode replaces modules, so an op written in ``forward`` (ResNet's ``out += identity``) has
no int8 kernel; PT2E quantises the graph ``torch.export`` captures, and ``torch.compile`` with
inductor freezing turns it into oneDNN int8 kernels (``compile=False``: the slow reference graph).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from hpml.optimize.quant.base import Quantizer, no_calibration
from hpml.optimize.quant.torch_ao import STATIC_LAYERS
from hpml.tensors import as_args, as_inference


def drop_unused_state(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Delete parameters and buffers no node of the graph reads any more: ``convert_pt2e``
    leaves the float originals beside the int8 weights, and the state dict would hold both."""
    used = {str(node.target) for node in graph_module.graph.nodes if node.op == "get_attr"}
    names = [name for name, _ in graph_module.named_parameters()]
    names += [name for name, _ in graph_module.named_buffers()]
    for name in names:
        if name not in used:
            owner_name, _, attr = name.rpartition(".")
            owner = graph_module.get_submodule(owner_name) if owner_name else graph_module
            delattr(owner, attr)
    return graph_module


def batch_example(batch: Any) -> tuple[Any, ...]:
    """``batch`` as export arguments, at least two rows: a batch of one would fix the size."""
    args = as_args(batch)
    first = args[0]
    if first.shape[0] < 2:
        first = torch.cat([first, first])
    return (first.cpu(), *args[1:])


class Int8Graph(nn.Module):
    """The converted int8 graph as an inference-only module, compiled with freezing by default
    (set around every call: a new shape compiles again). Every call runs under
    ``inference_mode`` on inference tensors (:func:`hpml.tensors.as_inference`), so the
    caller's grad mode (calibration's ``no_grad``, a test stage's ``inference_mode``) and its
    tensors' kind do not each compile the graph again.
    ``train()``/``eval()`` only set the flag.
    """

    def __init__(self, graph: torch.fx.GraphModule, compile: bool = True) -> None:
        super().__init__()
        self.graph = graph
        self.compiled = torch.compile(graph.forward) if compile else None

    def train(self, mode: bool = True) -> Int8Graph:
        self.training = mode
        return self

    def forward(self, *args: Any) -> Any:
        if self.compiled is None:
            return self.graph(*args)
        with torch.inference_mode(), torch._inductor.config.patch(freezing=True):
            return self.compiled(*as_inference(args))


class PT2EStatic(Quantizer):
    """Post-training static int8 of the exported graph: export, annotate, calibrate, convert."""

    name, backend = "static_int8", "pt2e"
    needs_calibration = float_inputs = True
    supported = STATIC_LAYERS

    def __init__(self, compile: bool = True) -> None:
        self.compile = compile
        self.compile_time_s: float | None = None

    def convert(self, net: nn.Module, calibration: Iterable[Any] = ()) -> torch.fx.GraphModule:
        """The converted graph (int8 weight constants, quantize/dequantize nodes), not compiled."""
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

        batches = iter(calibration)
        first = next(batches, None)
        if first is None:
            raise no_calibration()
        self.check_inputs(net, first)
        example = batch_example(first)
        batch = torch.export.Dim("batch", min=1)
        dynamic = tuple({0: batch} if i == 0 else None for i in range(len(example)))
        exported = torch.export.export(
            net.cpu().eval(), example, dynamic_shapes=dynamic, strict=True
        )
        config = x86.get_default_x86_inductor_quantization_config()  # per-channel weights only
        quantizer = x86.X86InductorQuantizer().set_global(config)
        prepared = prepare_pt2e(exported.module(), quantizer)
        with torch.no_grad():
            for calibration_batch in (first, *batches):
                prepared(*(t.cpu() for t in as_args(calibration_batch)))
        return drop_unused_state(convert_pt2e(prepared))

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        """The converted graph as an :class:`Int8Graph`; when ``compile``, its first call is timed
        in ``compile_time_s`` (a cache's load time where inductor's on-disk cache holds it)."""
        calibration = list(calibration)
        int8 = Int8Graph(self.convert(net, calibration), self.compile)
        if self.compile:
            start = time.perf_counter()
            with torch.no_grad():
                int8(*(t.cpu() for t in as_args(calibration[0])))
            self.compile_time_s = time.perf_counter() - start
        return int8
