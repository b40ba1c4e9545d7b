"""Pruning in plain PyTorch (no Lightning, no Hydra): ``apply_prune(model, method, amount,
example)``; :class:`Pruner` for a schedule of steps. See README.md for the modules and how to add
a method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from hpml.optimize import Applied
from hpml.optimize.prune.methods import MODES, Method, Structured, Unstructured
from hpml.optimize.prune.pruner import Pruner, PruneReport
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS, OUTPUT_LAYER

__all__ = [
    "DEFAULT_EXCLUDE",
    "DEFAULT_TARGETS",
    "MODES",
    "OUTPUT_LAYER",
    "Method",
    "PruneReport",
    "Pruner",
    "Structured",
    "Unstructured",
    "apply_prune",
]


def apply_prune(
    model: nn.Module,
    method: Method,
    amount: float,
    example: Any,
    mode: str | None = None,
    targets: Sequence[str] | None = DEFAULT_TARGETS,
    exclude: Sequence[str] | None = DEFAULT_EXCLUDE,
    **options: Any,
) -> Applied[PruneReport]:
    """``model`` pruned in place by ``method`` to ``amount`` of its targeted weights (masks
    folded in), and where its targets stand.

    Args:
        amount: the share of the targeted weights (rows, when structured) removed, in [0, 1).
        example: an input batch (physical mode traces the model on it).
        method, mode, targets, exclude, **options: :class:`Pruner`'s.
    """
    pruner = Pruner(method, mode, targets, exclude, **options)
    pruner.attach(model, example)
    report = pruner.prune(model, amount)
    return Applied(pruner.finalize(model), report)
