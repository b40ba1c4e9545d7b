"""``torch_compile``: ``torch.compile(mode=...)`` for inference, with a fresh dynamo state and
inductor's caches in ``workdir``, so its time is a cold compile: the first call of each shape.

``freezing`` (inductor's) folds the weights as constants and, on CPU, pre-packs them for oneDNN.
It applies only to a graph compiled with grad disabled while the flag is set, so
:class:`Inference` runs every call under ``inference_mode`` with ``freezing`` patched in.
``channels_last`` converts the net's 4-d weights to NHWC and converts 4-d inputs inside the graph.

The net is compiled behind a :class:`Graph` compiled in place (``module.compile()``), not as a
``torch.compile(net)`` ``OptimizedModule``: that one warns on every call made while a global
module hook is registered (``FlopCounterMode``'s module tracker, which the speed monitor's FLOP
count runs the deployed net under), since such a hook fires twice around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.errors import one_of
from hpml.optimize.compile.base import CompileOutput, Compiler, run_each, untraceable, use_cache_dir
from hpml.tensors import as_inference

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class Graph(nn.Module):
    """What is compiled: ``net``, on its 4-d tensor inputs in NHWC where ``channels_last`` (the
    conversion then in the graph). A wrapper, so compiling it in place leaves ``net`` eager."""

    def __init__(self, net: nn.Module, channels_last: bool = False) -> None:
        super().__init__()
        self.channels_last = channels_last
        self.net = net.to(memory_format=torch.channels_last) if channels_last else net

    def forward(self, *args: Any) -> Any:
        if not self.channels_last:
            return self.net(*args)
        return self.net(
            *(
                a.contiguous(memory_format=torch.channels_last)
                if isinstance(a, torch.Tensor) and a.dim() == 4
                else a
                for a in args
            )
        )


class Inference(nn.Module):
    """A ``torch.compile``'d module called the one way it was compiled (module docstring), so a
    recompile (new shape, caller's grad mode) takes the first compile's path; on inference
    tensors (:func:`hpml.tensors.as_inference`), so a test stage's batch compiles nothing
    again."""

    def __init__(self, compiled: nn.Module, freezing: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.freezing = freezing

    def forward(self, *args: Any) -> Any:
        from torch._inductor import config as inductor_config

        with torch.inference_mode(), inductor_config.patch(freezing=self.freezing):
            return self.compiled(*as_inference(args))


class TorchCompile(Compiler):
    """Args: ``mode``, ``dynamic``, ``fullgraph``: ``torch.compile``'s; ``freezing``,
    ``channels_last``: see the module; ``cache_dir``: inductor's cache (default:
    ``workdir/inductor_cache``)."""

    def __init__(
        self,
        mode: str = "default",
        dynamic: bool | None = None,
        fullgraph: bool = False,
        freezing: bool = False,
        channels_last: bool = False,
        cache_dir: Path | None = None,
    ) -> None:
        self.mode, self.dynamic, self.fullgraph = one_of("mode", mode, MODES), dynamic, fullgraph
        self.freezing, self.channels_last, self.cache_dir = freezing, channels_last, cache_dir

    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> CompileOutput:
        use_cache_dir(self.cache_dir or workdir / "inductor_cache")
        torch._dynamo.reset()  # no graphs left from an earlier compile in this process
        graph = Graph(net, self.channels_last)
        graph.compile(mode=self.mode, dynamic=self.dynamic, fullgraph=self.fullgraph)
        module = Inference(graph, self.freezing)
        try:
            run_each(module, examples)
        except Exception as exc:
            raise untraceable(net, self.name, exc) from exc
        return module, None
