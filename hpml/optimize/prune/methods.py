"""Pruning methods, one class each: what a method ranks lowest goes first (README.md).

A method says whether it removes whole rows or single weights, how mask mode zeroes a weight (a
``torch.nn.utils.prune`` method) and, when structured, how physical mode ranks what it cuts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch_pruning as tp
from torch import Tensor, nn
from torch.nn.utils import prune

from hpml.errors import ConfigError, one_of
from hpml.optimize import Named

MODES = ("mask", "physical")


def l1_scores(rows: Tensor) -> Tensor:
    return rows.abs().sum(1)


def l2_scores(rows: Tensor) -> Tensor:
    return rows.pow(2).sum(1).sqrt()


class ScoredRows(prune.BasePruningMethod):
    """Structured mask pruning of the rows (along ``dim``) that ``scores`` ranks lowest: for a
    method with its own ranking (FPGM, a plug-in), beyond torch's Ln norm and random."""

    PRUNING_TYPE = "structured"

    def __init__(
        self, amount: int | float, dim: int = 0, scores: Callable[[Tensor], Tensor] = l1_scores
    ) -> None:
        prune._validate_pruning_amount_init(amount)
        self.amount, self.dim, self.scores = amount, dim, scores

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        rows = t.transpose(0, self.dim).flatten(1) if self.dim else t.flatten(1)
        n_prune = prune._compute_nparams_toprune(self.amount, rows.shape[0])
        mask = default_mask.clone()
        if n_prune == 0:
            return mask
        drop = torch.argsort(self.scores(rows).to(rows.device))[:n_prune]
        return mask.index_fill_(self.dim, drop, 0)


class RowScores:
    """A torch-pruning group importance from a score per row of each group's root layer (the
    Conv/Linear whose output channels the group removes)."""

    def __init__(self, scores: Callable[[Tensor], Tensor]) -> None:
        self.scores = scores

    def __call__(self, group: Any) -> Tensor:
        module = group[0].dep.target.module
        return self.scores(module.weight.detach().flatten(1).float())


class Method(Named):
    """One pruning method; subclass :class:`Unstructured` or :class:`Structured`."""

    structured: ClassVar[bool] = False  # whole rows (channels, gate rows), else single weights
    global_scope: ClassVar[bool] = False  # mask mode ranks all targets' weights together
    mask: ClassVar[type[prune.BasePruningMethod]] = prune.L1Unstructured

    @property
    def mask_kwargs(self) -> Mapping[str, Any]:
        """Arguments of ``mask`` besides the amount."""
        return {}

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this method prunes in, its default first."""
        return MODES[::-1] if self.structured else MODES[:1]

    @property
    def default_mode(self) -> str:
        return self.modes[0]

    def check_mode(self, mode: str | None) -> str:
        """``mode`` (the default for None) when this method prunes in it; a ConfigError if not."""
        mode = mode or self.default_mode
        one_of("mode", mode, MODES)
        if mode not in self.modes:
            raise ConfigError(
                "mode",
                mode,
                f"{' or '.join(self.modes)} for {self.name}: single "
                "weights cannot be removed from a dense layer, only whole channels (a "
                "structured method such as l1_structured)",
            )
        return mode

    def apply_mask(self, module: nn.Module, name: str, count: int) -> None:
        """Zero ``count`` more units (rows when structured) of ``module.<name>``."""
        self.mask.apply(module, name, amount=count, **self.mask_kwargs)

    def mask_alone(self, weight: Tensor, amount: float) -> Tensor:
        """The mask this method gives ``weight`` pruned alone to ``amount`` (sensitivity)."""
        return self.mask(amount, **self.mask_kwargs).compute_mask(weight, torch.ones_like(weight))

    def channels(self) -> Any:
        """A fresh torch-pruning group importance (physical Conv/Linear): structured only."""
        raise NotImplementedError(f"{self.name} removes single weights, not channels")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Unstructured(Method):
    """Single weights, through ``mask`` (a ``torch.nn.utils.prune`` unstructured method)."""


class Structured(Method):
    """Whole rows ranked by :meth:`scores`; subclasses may rank channels by torch-pruning's own
    group importance (over every layer of the group) instead."""

    structured = True
    mask = ScoredRows

    @property
    def mask_kwargs(self) -> Mapping[str, Any]:
        return {"dim": 0, "scores": self.scores}

    def scores(self, rows: Tensor) -> Tensor:
        """One score per row of ``rows`` (``N x K``): the lowest are pruned first."""
        raise NotImplementedError(f"{type(self).__name__} must define scores(rows)")

    def channels(self) -> Any:
        return RowScores(self.scores)


class L1Unstructured(Unstructured):
    """Single weights with the smallest magnitude, per layer."""

    mask = prune.L1Unstructured


class GlobalL1Unstructured(L1Unstructured):
    """Single weights with the smallest magnitude across all targets at once."""

    global_scope = True


class RandomUnstructured(Unstructured):
    """Single weights chosen at random, per layer: the baseline."""

    mask = prune.RandomUnstructured


class L1Structured(Structured):
    """Rows with the smallest L1 norm; channels by torch-pruning's group L1 magnitude."""

    mask = prune.LnStructured
    norm = 1

    @property
    def mask_kwargs(self) -> Mapping[str, Any]:
        return {"n": self.norm, "dim": 0}

    def scores(self, rows: Tensor) -> Tensor:
        return l1_scores(rows)

    def channels(self) -> Any:
        return tp.importance.MagnitudeImportance(p=self.norm)


class L2Structured(L1Structured):
    """Rows with the smallest L2 norm; channels by torch-pruning's group L2 magnitude."""

    norm = 2

    def scores(self, rows: Tensor) -> Tensor:
        return l2_scores(rows)


class RandomStructured(Structured):
    """Rows chosen at random: the baseline."""

    mask = prune.RandomStructured

    @property
    def mask_kwargs(self) -> Mapping[str, Any]:
        return {"dim": 0}

    def scores(self, rows: Tensor) -> Tensor:
        return torch.rand(rows.shape[0])

    def channels(self) -> Any:
        return tp.importance.RandomImportance()


class FPGM(Structured):
    """Rows nearest the geometric median of their layer (He et al., CVPR 2019): the others can
    best stand in for them."""

    def scores(self, rows: Tensor) -> Tensor:
        """Summed distance of each row to the others: the lowest is nearest the median."""
        rows = rows.float().unsqueeze(0)
        return torch.cdist(rows, rows)[0].sum(1)

    def channels(self) -> Any:
        return tp.importance.FPGMImportance(p=2)
