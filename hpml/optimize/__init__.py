"""Model optimisations in plain PyTorch: pruning, quantisation, compilation (no Lightning here),
each method a :class:`Named` class, each ``apply_*`` returning an :class:`Applied`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from torch import nn

R = TypeVar("R")


class Named:
    """A method of a step, named in runs (tags, params, metric names) and refusals by ``name``:
    its class's name in snake case (``L2Structured``: ``l2_structured``), on the class and its
    instances alike, unless its class, or an instance, sets one."""

    name: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()


@dataclass
class Applied(Generic[R]):
    """The ``module`` a step made of a net, and its ``report``: pruning's ``PruneReport``,
    compiling's ``Compiled``, quantising's seconds spent compiling kernels (None: none)."""

    module: nn.Module
    report: R
