"""Model optimisations in plain PyTorch: pruning, quantisation, compilation (no Lightning here).

Each step's ``apply_*`` returns one type, :class:`Applied`: the module it made and its report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from torch import nn

R = TypeVar("R")


@dataclass
class Applied(Generic[R]):
    """What a step made of a net: ``module``, and its ``report`` (pruning's
    :class:`~hpml.optimize.prune.PruneReport`, compiling's :class:`~hpml.optimize.compile.Compiled`,
    quantising's seconds spent compiling kernels, None where it compiles none)."""

    module: nn.Module
    report: R
