"""Mask pruning through ``torch.nn.utils.prune``: zeros in place, same shapes, no speedup.

``MaskPruner.prune(model, amount)`` brings the targeted weights to ``amount`` sparsity *of the
original weights*, however often it is called: a gradual schedule 0.3 -> 0.6 -> 0.9 ends at 0.9,
not at 1 - 0.7 * 0.4 * 0.1 (Lightning's ``ModelPruning`` compounds ``amount`` each epoch). Each call
removes only the units still missing, as an integer count, so ``torch.nn.utils.prune``'s
containers pick them among the weights still alive. Weights are never reset (no lottery ticket)
and biases are never touched. ``make_permanent`` folds the masks into the weights (the state dict
is twice the size until then) and should precede saving.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils import prune

from hpml.optimize.prune.amount import units_to_remove
from hpml.optimize.prune.targets import Target


class FPGMStructured(prune.BasePruningMethod):
    """Structured pruning of the rows nearest the geometric median (He et al., CVPR 2019).

    A row (filter, output unit) whose summed Euclidean distance to all other rows is smallest is
    the one the others can best stand in for; those rows are zeroed first.
    """

    PRUNING_TYPE = "structured"

    def __init__(self, amount: int | float, dim: int = 0) -> None:
        prune._validate_pruning_amount_init(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        rows = t.transpose(0, self.dim).flatten(1) if self.dim else t.flatten(1)
        n_prune = prune._compute_nparams_toprune(self.amount, rows.shape[0])
        mask = default_mask.clone()
        if n_prune == 0:
            return mask
        distances = torch.cdist(rows.unsqueeze(0).float(), rows.unsqueeze(0).float())[0].sum(1)
        drop = torch.argsort(distances)[:n_prune]
        index = [slice(None)] * t.dim()
        index[self.dim] = drop
        mask[tuple(index)] = 0
        return mask

    @classmethod
    def apply(
        cls,
        module: nn.Module,
        name: str,
        amount: int | float,  # type: ignore[override]
        dim: int = 0,
        importance_scores: Tensor | None = None,
    ) -> FPGMStructured:
        return super().apply(
            module, name, amount=amount, dim=dim, importance_scores=importance_scores
        )


def _l1_unstructured(module: nn.Module, name: str, amount: int) -> None:
    prune.l1_unstructured(module, name, amount)


def _random_unstructured(module: nn.Module, name: str, amount: int) -> None:
    prune.random_unstructured(module, name, amount)


def _l1_structured(module: nn.Module, name: str, amount: int) -> None:
    prune.ln_structured(module, name, amount, n=1, dim=0)


def _l2_structured(module: nn.Module, name: str, amount: int) -> None:
    prune.ln_structured(module, name, amount, n=2, dim=0)


def _random_structured(module: nn.Module, name: str, amount: int) -> None:
    prune.random_structured(module, name, amount, dim=0)


def _fpgm(module: nn.Module, name: str, amount: int) -> None:
    FPGMStructured.apply(module, name, amount)


# method -> (pruning function of one weight, structured?)
LOCAL = {
    "l1_unstructured": (_l1_unstructured, False),
    "random_unstructured": (_random_unstructured, False),
    "l1_structured": (_l1_structured, True),
    "l2_structured": (_l2_structured, True),
    "random_structured": (_random_structured, True),
    "fpgm": (_fpgm, True),
}
GLOBAL = ("global_l1_unstructured",)
METHODS = (*LOCAL, *GLOBAL)


def one_shot_mask(method: str, weight: Tensor, amount: float) -> Tensor:
    """The mask ``method`` would give ``weight`` alone at ``amount`` (for sensitivity scans)."""
    ones = torch.ones_like(weight)
    if method in ("l1_unstructured", "global_l1_unstructured"):
        return prune.L1Unstructured(amount).compute_mask(weight, ones)
    if method == "random_unstructured":
        return prune.RandomUnstructured(amount).compute_mask(weight, ones)
    if method in ("l1_structured", "l2_structured"):
        n = 1 if method == "l1_structured" else 2
        return prune.LnStructured(amount, n=n, dim=0).compute_mask(weight, ones)
    if method == "random_structured":
        return prune.RandomStructured(amount, dim=0).compute_mask(weight, ones)
    return FPGMStructured(amount).compute_mask(weight, ones)


def _mask(module: nn.Module, name: str) -> Tensor | None:
    return getattr(module, f"{name}_mask", None)


def pruned_rows(module: nn.Module, name: str) -> int:
    """Rows (dim 0) whose mask is all zero."""
    mask = _mask(module, name)
    return 0 if mask is None else int((mask.flatten(1) == 0).all(1).sum())


def pruned_elements(module: nn.Module, name: str) -> int:
    mask = _mask(module, name)
    return 0 if mask is None else int((mask == 0).sum())


class MaskPruner:
    """Zero the weights ``method`` ranks lowest among ``targets``, through forward pre-hooks."""

    def __init__(self, method: str, targets: Sequence[Target]) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown mask method {method!r} (valid: {', '.join(METHODS)})")
        self.method, self.targets = method, list(targets)

    @property
    def structured(self) -> bool:
        return self.method in LOCAL and LOCAL[self.method][1]

    def prune(self, model: nn.Module, amount: float) -> None:
        """Bring the targets to ``amount`` of their original weights (rows, when structured)."""
        if self.method in GLOBAL:
            pairs = [(t.module(model), t.param_name) for t in self.targets]
            total = sum(getattr(m, n).numel() for m, n in pairs)
            done = sum(pruned_elements(m, n) for m, n in pairs)
            missing = max(0, units_to_remove(total, amount) - done)
            prune.global_unstructured(pairs, pruning_method=prune.L1Unstructured, amount=missing)
            return
        apply, structured = LOCAL[self.method]
        for target in self.targets:
            module = target.module(model)
            weight = getattr(module, target.param_name)
            if structured:
                total, done = weight.shape[0], pruned_rows(module, target.param_name)
            else:
                total, done = weight.numel(), pruned_elements(module, target.param_name)
            apply(module, target.param_name, max(0, units_to_remove(total, amount) - done))

    def make_permanent(self, model: nn.Module) -> None:
        """Fold masks into the weights and drop the hooks (no-op for weights without a mask)."""
        for target in self.targets:
            module = target.module(model)
            if prune.is_pruned(module) and _mask(module, target.param_name) is not None:
                prune.remove(module, target.param_name)


def make_permanent(model: nn.Module) -> nn.Module:
    """Fold every ``torch.nn.utils.prune`` mask in ``model`` into its weight, in place."""
    for module in model.modules():
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                prune.remove(module, hook._tensor_name)
    return model


def folded_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every mask folded into its weight; ``model`` keeps its masks.

    The masked weights are recomputed without autograd first: after a forward pass in grad mode
    they are non-leaf tensors, which ``copy.deepcopy`` refuses.
    """
    for module in model.modules():
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                with torch.no_grad():
                    setattr(module, hook._tensor_name, hook.apply_mask(module))
    return make_permanent(copy.deepcopy(model))
