"""The pruning methods, in one table: the only place a method's name is spelt out.

A method says whether it removes whole rows (output channels, LSTM gate rows) or single weights,
how mask mode zeroes one weight (a ``torch.nn.utils.prune`` method), and for structured methods
how physical mode ranks what it cuts: torch-pruning's group importance for Conv/Linear channels,
a score per row for LSTM hidden units (their rows across the four gate blocks). Adding a method is
one entry in ``METHODS`` plus one ``conf/prune/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch_pruning as tp
from torch import Tensor
from torch.nn.utils import prune

from hpml.errors import ConfigError


class FPGMStructured(prune.BasePruningMethod):
    """Structured pruning of the rows nearest the geometric median (He et al., CVPR 2019).

    A row (filter, output unit) whose summed Euclidean distance to all other rows is smallest is
    the one the others can best stand in for; those rows are zeroed first. torch.nn.utils.prune
    has no FPGM, torch-pruning's ``FPGMImportance`` ranks whole groups only: hence this class.
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
        drop = torch.argsort(fpgm_scores(rows))[:n_prune]
        index = [slice(None)] * t.dim()
        index[self.dim] = drop
        mask[tuple(index)] = 0
        return mask

    @classmethod
    def apply(
        cls,
        module: torch.nn.Module,
        name: str,
        amount: int | float,  # type: ignore[override]
        dim: int = 0,
        importance_scores: Tensor | None = None,
    ) -> FPGMStructured:
        return super().apply(
            module, name, amount=amount, dim=dim, importance_scores=importance_scores
        )


def l1_scores(rows: Tensor) -> Tensor:
    return rows.abs().sum(1)


def l2_scores(rows: Tensor) -> Tensor:
    return rows.pow(2).sum(1).sqrt()


def fpgm_scores(rows: Tensor) -> Tensor:
    """Summed distance of each row to the others: the lowest is nearest the geometric median."""
    rows = rows.float().unsqueeze(0)
    return torch.cdist(rows, rows)[0].sum(1)


def random_scores(rows: Tensor) -> Tensor:
    return torch.rand(rows.shape[0])


@dataclass(frozen=True)
class Method:
    """One pruning method; rows with the lowest scores go first."""

    name: str
    structured: bool
    mask: type[prune.BasePruningMethod]
    mask_kwargs: Mapping[str, Any] = field(default_factory=dict)
    global_scope: bool = False
    channels: Callable[[], Any] | None = None  # torch-pruning importance (physical Conv/Linear)
    units: Callable[[Tensor], Tensor] | None = None  # rows -> scores (physical LSTM units)

    @property
    def default_mode(self) -> str:
        return "physical" if self.structured else "mask"

    def apply_mask(self, module: torch.nn.Module, name: str, count: int) -> None:
        """Zero ``count`` more units (rows when structured) of ``module.<name>``."""
        self.mask.apply(module, name, amount=count, **self.mask_kwargs)

    def mask_alone(self, weight: Tensor, amount: float) -> Tensor:
        """The mask this method gives ``weight`` pruned alone to ``amount`` (sensitivity)."""
        return self.mask(amount, **self.mask_kwargs).compute_mask(weight, torch.ones_like(weight))


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("l1_unstructured", False, prune.L1Unstructured),
        Method("random_unstructured", False, prune.RandomUnstructured),
        Method("global_l1_unstructured", False, prune.L1Unstructured, global_scope=True),
        Method(
            "l1_structured",
            True,
            prune.LnStructured,
            {"n": 1, "dim": 0},
            channels=lambda: tp.importance.MagnitudeImportance(p=1),
            units=l1_scores,
        ),
        Method(
            "l2_structured",
            True,
            prune.LnStructured,
            {"n": 2, "dim": 0},
            channels=lambda: tp.importance.MagnitudeImportance(p=2),
            units=l2_scores,
        ),
        Method(
            "random_structured",
            True,
            prune.RandomStructured,
            {"dim": 0},
            channels=tp.importance.RandomImportance,
            units=random_scores,
        ),
        Method(
            "fpgm",
            True,
            FPGMStructured,
            {"dim": 0},
            channels=lambda: tp.importance.FPGMImportance(p=2),
            units=fpgm_scores,
        ),
    )
}


def find(name: str) -> Method:
    """The method called ``name``; a ConfigError naming the valid ones otherwise."""
    if name not in METHODS:
        raise ConfigError("method", name, f"one of {', '.join(METHODS)}")
    return METHODS[name]
