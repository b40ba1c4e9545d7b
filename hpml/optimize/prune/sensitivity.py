"""Sensitivity scan: each targeted weight alone pruned to each amount, the model judged, restored.

found = scan(net, pruner.targets, pruner.method.mask_alone, [0.5, 0.9], lambda: evaluate(net))
found["fc1.weight"][50]            # {quantity: value} with fc1.weight alone pruned 50%
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from hpml.optimize.prune.amount import check_amount
from hpml.optimize.prune.targets import Target

Results = dict[str, dict[int, dict[str, float]]]


def scan(
    net: nn.Module,
    targets: Sequence[Target],
    mask_alone: Callable[[Tensor, float], Tensor],
    amounts: Sequence[float],
    evaluate: Callable[[], dict[str, float]],
) -> Results:
    """``{weight name: {amount in percent: evaluate()}}``, each weight alone pruned by
    ``mask_alone(weight, amount)``; every weight is as it was when this returns."""
    amounts = [check_amount(a, "sensitivity") for a in amounts]
    results: Results = {}
    for target in targets:
        weight = getattr(target.module(net), target.param_name)
        saved = weight.detach().clone()
        results[target.name] = {}
        for amount in amounts:
            try:
                with torch.no_grad():
                    weight.mul_(mask_alone(saved, amount))
                found = evaluate()
            finally:
                with torch.no_grad():
                    weight.copy_(saved)
            results[target.name][round(100 * amount)] = found
    return results
