"""``torchscript``: ``torch.jit.trace`` (checked on a second batch size), ``torch.jit.freeze``,
``torch.jit.optimize_for_inference``. Deprecated upstream; kept for the studies that measured it.
Its time covers tracing, freezing and the profiling calls the executor needs per shape."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.optimize.compile import base


class Torchscript(base.Compiler):
    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> base.CompileOutput:
        try:
            with torch.no_grad():
                traced = torch.jit.trace(
                    net,
                    base.as_args(examples[0]),
                    check_inputs=[base.as_args(e) for e in examples[1:]] or None,
                )
                module = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
                with torch.inference_mode():  # the executor specialises on first calls
                    base.run_each(module, examples, times=2)
        except Exception as exc:
            raise base.untraceable(net, self.name(), exc) from exc
        return base.Program(module, self.name()), None

    def size_bytes(self, module: nn.Module, artifact: Path | None) -> int | None:
        """The size of the saved TorchScript file."""
        with tempfile.TemporaryDirectory() as tmp:
            torch.jit.save(module.program, Path(tmp) / "model.ts")
            return (Path(tmp) / "model.ts").stat().st_size
