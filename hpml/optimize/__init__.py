"""Model optimisations in plain PyTorch: pruning, quantisation, compilation (no Lightning here),
each ``apply_*`` returning an :class:`Applied`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from torch import nn

R = TypeVar("R")


@dataclass
class Applied(Generic[R]):
    """The ``module`` a step made of a net, and its ``report``: pruning's ``PruneReport``,
    compiling's ``Compiled``, quantising's seconds spent compiling kernels (None: none)."""

    module: nn.Module
    report: R
