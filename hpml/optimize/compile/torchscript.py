"""``torchscript``: ``torch.jit.trace`` (checked on a second batch size), ``torch.jit.freeze``,
``torch.jit.optimize_for_inference``. Deprecated upstream; kept for the studies that measured it.
Its time covers tracing, freezing, saving and the profiling calls the executor needs per shape.

The frozen module, weights included, is saved as ``workdir/model.ts``: the file a deployment
loads (and passes to ``optimize_for_inference`` again), and the size hpml reports. The optimised
module itself cannot be saved whole: its oneDNN weight constants are not serialised, so its file
holds the code and the weights left dense (a few kB for a convolutional net) and fails to load.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.console import notice_once
from hpml.optimize.compile import base
from hpml.tensors import as_args


class Torchscript(base.Compiler):
    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> base.CompileOutput:
        path = workdir / "model.ts"
        notice_once(
            "torch.jit",
            "torch.jit (TorchScript) is deprecated upstream; hpml keeps compile=torchscript for "
            "the studies that measured it. compile=torch_compile or compile=export replaces it.",
        )
        try:
            with torch.no_grad():
                traced = torch.jit.trace(
                    net,
                    as_args(examples[0]),
                    check_inputs=[as_args(e) for e in examples[1:]] or None,
                )
                frozen = torch.jit.freeze(traced)
                workdir.mkdir(parents=True, exist_ok=True)
                torch.jit.save(frozen, path)
                module = torch.jit.optimize_for_inference(frozen)
                with torch.inference_mode():  # the executor specialises on first calls
                    base.run_each(module, examples, times=2)
        except Exception as exc:
            raise base.untraceable(net, self.name, exc) from exc
        return base.Program(module, self.name), path
