"""Mask pruning through ``torch.nn.utils.prune``: zeros in place, same shapes, no speed-up.

Each call brings the targets to ``amount`` of the *original* weights (0.3 -> 0.6 -> 0.9 ends at
0.9), removing only the units still missing.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils import prune

from hpml.optimize.prune.amount import units_to_remove
from hpml.optimize.prune.methods import Method
from hpml.optimize.prune.targets import Target


def pruned(module: nn.Module, name: str, rows: bool) -> int:
    """Elements of ``module.<name>`` whose mask is zero, or with ``rows`` the rows (dim 0) whose
    mask is all zero."""
    mask = getattr(module, f"{name}_mask", None)
    if mask is None:
        return 0
    return int(((mask.flatten(1) == 0).all(1) if rows else mask == 0).sum())


class MaskPruner:
    """Zero the weights ``method`` ranks lowest among ``targets``, through forward pre-hooks."""

    def __init__(self, method: Method, targets: Sequence[Target]) -> None:
        self.method, self.targets = method, list(targets)

    def prune(self, model: nn.Module, amount: float) -> dict[str, tuple[int, int]]:
        """Bring the targets to ``amount`` of their original weights (rows, when structured);
        no width changes."""
        if self.method.global_scope:
            pairs = [(t.module(model), t.param_name) for t in self.targets]
            total = sum(getattr(m, n).numel() for m, n in pairs)
            done = sum(pruned(m, n, rows=False) for m, n in pairs)
            missing = max(0, units_to_remove(total, amount) - done)
            prune.global_unstructured(
                pairs, pruning_method=self.method.mask, amount=missing, **self.method.mask_kwargs
            )
            return {}
        for target in self.targets:
            module = target.module(model)
            weight = getattr(module, target.param_name)
            total = weight.shape[0] if self.method.structured else weight.numel()
            done = pruned(module, target.param_name, self.method.structured)
            missing = max(0, units_to_remove(total, amount) - done)
            self.method.apply_mask(module, target.param_name, missing)
        return {}


def make_permanent(model: nn.Module) -> nn.Module:
    """Fold every ``torch.nn.utils.prune`` mask in ``model`` into its weight, in place."""
    for module in model.modules():
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                prune.remove(module, hook._tensor_name)
    return model


def folded_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every mask folded into its weight; ``model`` keeps its masks
    (recomputed without autograd first: ``copy.deepcopy`` refuses non-leaf tensors)."""
    for module in model.modules():
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                with torch.no_grad():
                    setattr(module, hook._tensor_name, hook.apply_mask(module))
    return make_permanent(copy.deepcopy(model))
