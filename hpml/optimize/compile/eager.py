"""``eager``: the net as it is, compiled by nothing: ``compile=auto``'s baseline candidate, timed
and checked the same way as the methods it is weighed against."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from hpml.optimize.compile.base import CompileOutput, Compiler


class Eager(Compiler):
    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> CompileOutput:
        return net, None
