"""``export``: ``torch.export.export`` with a dynamic batch dimension, saved with
``torch.export.save`` as ``workdir/model.pt2``; the program's module runs. No speed-up is expected:
it is the portable artifact for AOTInductor, ExecuTorch and other runtimes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.optimize.compile.base import CompileOutput, Compiler, Program, untraceable
from hpml.tensors import as_args


def exported(net: nn.Module, examples: Sequence[Any], method: str) -> Any:
    """``net`` exported on the largest example, its batch dimension dynamic."""
    example = as_args(examples[-1])
    dynamic = tuple(
        {0: torch.export.Dim.AUTO} if isinstance(a, torch.Tensor) else None for a in example
    )
    try:
        return torch.export.export(net, example, dynamic_shapes=dynamic)
    except Exception as exc:
        raise untraceable(net, method, exc) from exc


class Export(Compiler):
    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> CompileOutput:
        program = exported(net, examples, self.name)
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "model.pt2"
        torch.export.save(program, path)
        return Program(program.module(), self.name), path
